"""The span scenarios of ``make bench`` (``--only spans,spans_memory,spans_delay``): their
sizes and settings, the backlogs they read, and the lines they print as they go."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks import span_scenarios
from benchmarks.kafka import fill_keyed
from benchmarks.span_records import CYCLE, DENSE_GENAI_SPANS, dense_records, records
from benchmarks.span_scenarios import SPAN_PARTITIONS, Assembly
from benchmarks.systems import Bench

SPAN_SCENARIOS = ("spans", "spans_memory", "spans_delay")


@dataclass(frozen=True, slots=True)
class SpanSizes:
    """How much each span scenario reads, and with which assembly settings."""

    throughput_records: int  # of the mixed cycle: 100 spans each
    throughput_assembly: Assembly
    memory_assembly: Assembly  # MAX_OPEN_TRACES records fill it, ``memory_past`` more follow
    memory_past: int
    delay_records: int  # produced live, a whole number of cycles
    delay_rate: float  # records per second
    delay_assembly: Assembly
    delay_judge_s: float


SPAN_DEFAULT = SpanSizes(
    throughput_records=20_000,  # 2,000,000 spans
    throughput_assembly=Assembly(quiet_s=1.0, max_wait_s=10.0),
    memory_assembly=Assembly(quiet_s=10.0, max_wait_s=120.0, max_open_traces=10_000),
    memory_past=20_000,  # 2,000,000 spans past a full assembly
    delay_records=2_000, delay_rate=100.0,
    delay_assembly=Assembly(quiet_s=2.0, max_wait_s=30.0), delay_judge_s=0.5,
)
SPAN_QUICK = SpanSizes(
    throughput_records=3_000,
    throughput_assembly=Assembly(quiet_s=1.0, max_wait_s=10.0),
    memory_assembly=Assembly(quiet_s=3.0, max_wait_s=30.0, max_open_traces=2_000),
    memory_past=2_000,
    delay_records=800, delay_rate=100.0,
    delay_assembly=Assembly(quiet_s=2.0, max_wait_s=30.0), delay_judge_s=0.5,
)


async def run_spans(
    bench: Bench, sizes: SpanSizes, chosen: set[str], dlq: str, say: Callable[[str], None]
) -> dict[str, Any]:
    """The chosen span scenarios, in order; their results by scenario name."""
    results: dict[str, Any] = {}
    if "spans" in chosen:
        count = sizes.throughput_records
        topic = await bench.topic("spans", SPAN_PARTITIONS)
        took, size = await _fill(bench, topic, ((r.key, r.value) for r in records(count)))
        say(f"span throughput: {count} records of 100 spans ({size / count / 1000:.1f} kB "
            f"each, 95% without GenAI content) on {SPAN_PARTITIONS} partitions, produced in "
            f"{took:.1f} s; instant judge:")
        sample = [r.value for r in records(CYCLE * 100, seed=3)]
        result = await span_scenarios.throughput(
            bench, topic, count, dlq, sizes.throughput_assembly, sample=sample)
        results["spans"] = result
        read, worker, ceiling = result["read"], result["worker"], result["ceiling"]
        parts = ceiling["parts"]
        say(f"  read loop: {read['records_per_s']:.0f} records/s ({read['spans_per_s']:,} "
            f"spans/s), {read['cpu_ms_per_record']:.3f} ms CPU per record")
        say(f"  worker:    {worker['records_per_s']:.0f} records/s ({worker['spans_per_s']:,} "
            f"spans/s), {worker['cpu_ms_per_record']:.3f} ms CPU per record, "
            f"{worker['verdicts']}/{worker['verdicts_expected']} verdicts; waited for a CPU "
            f"{worker['waited_for_cpu_share']:.0%} of the time = {result['ratio_to_read']:.3f}"
            f" of the read loop")
        say(f"  ceiling (one core, the parts alone): read {parts['read_ms']:.3f} + decode "
            f"{parts['decode_ms']:.3f} (parse alone {parts['parse_ms']:.3f}) + "
            f"{parts['judged_per_record']:g} x judge path {parts['verdict_ms']:.3f} (of it map "
            f"{parts['map_ms']:.3f}) ms = {ceiling['records_per_cpu_s']:.0f} records per "
            f"CPU-s; worker {worker['records_per_cpu_s']:.0f} per CPU-s = "
            f"{result['ratio_to_ceiling']:.3f} of it")
        loop = result["ceiling_loop"]
        before, after = (run["cpu_ms_per_record"] for run in loop["runs"])
        say(f"  ceiling loop (the same parts run, measured as the worker, before and after "
            f"it): {loop['records_per_s']:.0f} records/s, {loop['cpu_ms_per_record']:.3f} ms "
            f"CPU per record ({before:.3f} and {after:.3f}; decoding {loop['decode_ms']} of "
            f"it, alone {parts['decode_ms']:.3f}), "
            f"{loop['verdicts']}/{loop['verdicts_expected']} verdicts; worker "
            f"{result['ratio_to_ceiling_loop']:.3f} of it per CPU-s")
        say(f"  with publishing a verdict ({parts['publish_ms']:.3f} ms each) as a part: "
            f"{ceiling['with_publish_records_per_cpu_s']:.0f} records per CPU-s; worker "
            f"{result['ratio_to_ceiling_with_publish']:.3f} of it")
    if "spans_memory" in chosen:
        cap = sizes.memory_assembly.max_open_traces
        count = cap + sizes.memory_past
        topic = await bench.topic("spans-dense", SPAN_PARTITIONS)
        took, size = await _fill(bench, topic,
                                 ((r.key, r.value) for r in dense_records(count)))
        say(f"span memory: {count} records, each a trace with {DENSE_GENAI_SPANS} GenAI "
            f"spans of 100, MAX_OPEN_TRACES={cap}, produced in {took:.1f} s:")
        result = await span_scenarios.memory(bench, topic, count, dlq, sizes.memory_assembly)
        results["spans_memory"] = result
        say(f"  {result['spans']:,} spans in {result['elapsed_s']} s; peak RSS "
            f"{result['peak_rss_mb']} MB (halves {result['first_half_peak_mb']} and "
            f"{result['second_half_peak_mb']} MB), slope {result['rss_slope_mb_per_min']} "
            f"MB/min; most open traces at a pause {result['most_open_traces']}")
    if "spans_delay" in chosen:
        say(f"span delay: {sizes.delay_records} records live at {sizes.delay_rate:g}/s, "
            f"TRACE_QUIET_SECONDS={sizes.delay_assembly.quiet_s:g}, judge "
            f"{sizes.delay_judge_s:g} s:")
        result = await span_scenarios.delay(
            bench, records_per_s=sizes.delay_rate, count=sizes.delay_records,
            assembly=sizes.delay_assembly, judge_latency_s=sizes.delay_judge_s)
        results["spans_delay"] = result
        say(f"  {result['matched']} of {result['verdicts_expected']} traces: excess over "
            f"quiet + judge p50 {result['excess_p50_s']} s, p95 {result['excess_p95_s']} s, "
            f"max {result['excess_max_s']} s")
    return results


async def _fill(bench: Bench, topic: str, pairs: Any) -> tuple[float, int]:
    started = time.monotonic()
    _, size = await fill_keyed(bench.bootstrap, topic, pairs)
    return time.monotonic() - started, size
