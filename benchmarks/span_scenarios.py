"""The span benchmarks: throughput against a bare read loop, memory with the assembly full,
and the delay from a trace's last span to its verdict.

Each runs the real ``groundedness run`` with ``TRACES_FORMAT=otlp_proto`` over records from
``span_records`` and times it from the broker's side only (``group_watch``): the consumer
group's assignment, its committed offsets, and the topics' ``LogAppendTime`` stamps. CPU time,
run-queue waits and RSS come from ``/proc`` of the system's process.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from aiokafka import AIOKafkaProducer

from benchmarks import span_ceiling
from benchmarks.capacity import _slope_per_min
from benchmarks.ceiling_loop import decode_figure
from benchmarks.group_watch import GroupWatch, Progress
from benchmarks.kafka import OffsetWatch, verdict_times
from benchmarks.procs import Child
from benchmarks.span_records import (
    CYCLE,
    JUDGED_PER_CYCLE,
    SPANS_PER_RECORD,
    SpanRecord,
    records,
)
from benchmarks.systems import (
    CEILING,
    READ,
    WORKER,
    Bench,
    Judge,
    RunSpec,
    start_judge,
    start_system,
)

SPAN_PARTITIONS = 6
LOG_APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}
NO_JUDGE_URL = "http://127.0.0.1:9/v1"  # the read loop calls no judge


@dataclass(frozen=True, slots=True)
class Assembly:
    """The worker's assembly settings for one scenario."""

    quiet_s: float
    max_wait_s: float
    max_open_traces: int = 10_000

    def env(self) -> dict[str, str]:
        """The environment variables that set them."""
        return {
            "TRACES_FORMAT": "otlp_proto",
            "TRACE_QUIET_SECONDS": f"{self.quiet_s:g}",
            "TRACE_MAX_WAIT_SECONDS": f"{self.max_wait_s:g}",
            "MAX_OPEN_TRACES": str(self.max_open_traces),
        }


def judged_traces(count: int) -> int:
    """Traces a worker judges over the first ``count`` records of ``records()``: two a whole
    cycle; in a partial one its RAG trace (the head alone closes by max wait), and its agent
    run if the cycle got that far (slot 7)."""
    whole, rest = divmod(count, CYCLE)
    return whole * JUDGED_PER_CYCLE + (rest > 0) + (rest > 7)


@dataclass
class Measured:
    """One system's run over a backlog, from its group's assignment to its last commit."""

    progress: Progress
    child: Child
    cpu_s: float
    ran_s: float
    waited_s: float
    peak_rss_mb: float

    def figures(self) -> dict[str, Any]:
        """Rates and costs per record, as the results JSON holds them."""
        progress, total = self.progress, self.progress.total
        rate, steady = progress.rate(), progress.steady_rate()
        assert progress.stable_at is not None
        first = progress.first_commit_at
        elapsed = progress.done_at - progress.stable_at if progress.done_at else None
        return {
            "records": total,
            "spans": total * SPANS_PER_RECORD,
            "finished": progress.done_at is not None,
            "records_per_s": round(rate, 1) if rate else None,
            "spans_per_s": round(rate * SPANS_PER_RECORD) if rate else None,
            "steady_records_per_s": round(steady, 1) if steady else None,
            "elapsed_s": round(elapsed, 3) if elapsed else None,
            "first_commit_after_s": round(first - progress.stable_at, 3) if first else None,
            "cpu_s": round(self.cpu_s, 2),
            "cpu_ms_per_record": round(self.cpu_s / total * 1000, 4),
            "records_per_cpu_s": round(total / max(self.cpu_s, 1e-9), 1),
            # The main thread's time: on a CPU, and runnable but waiting for one (other
            # processes on the machine), as shares of the elapsed time.
            "ran_share": round(self.ran_s / elapsed, 3) if elapsed else None,
            "waited_for_cpu_share": round(self.waited_s / elapsed, 3) if elapsed else None,
            "peak_rss_mb": self.peak_rss_mb,
            "log": str(self.child.log_path),
        }


async def _measure(
    bench: Bench, spec: RunSpec, total: int, timeout_s: float, sample_rss: bool = False
) -> Measured:
    """Start one system on a backlog of ``total`` records; follow its group to the end."""
    child = start_system(bench, spec)
    sampler = asyncio.create_task(child.sample_rss(1.0)) if sample_rss else None
    try:
        async with GroupWatch(bench.bootstrap, spec.group, spec.traces_topic) as watch:
            while not await watch.stable():
                if not child.alive():
                    raise RuntimeError(f"{child.name} exited early:\n{child.log_tail()}")
                await asyncio.sleep(0.02)
            # From the assignment on: interpreter start-up and joining are left out.
            cpu_start, (ran_start, waited_start) = child.cpu_s(), child.run_and_wait_s()
            progress = await watch.follow(child, total, timeout_s)
            cpu_s = child.cpu_s() - cpu_start
            ran, waited = child.run_and_wait_s()
            peak = child.memory().get("VmHWM", 0.0)
    finally:
        if sampler is not None:
            sampler.cancel()
        await child.stop()
    return Measured(progress, child, cpu_s, ran - ran_start, waited - waited_start,
                    round(peak, 1))


async def throughput(
    bench: Bench, topic: str, count: int, dlq: str, assembly: Assembly, *,
    judge_concurrency: int = 64, timeout_s: float = 300.0, sample: list[bytes],
) -> dict[str, Any]:
    """The bare read loop, then the ceiling loop, the worker and the ceiling loop again (the
    same instant judge), over the same ``count`` records; then the ceiling's parts, measured
    alone on ``sample`` (records of the same mix)."""
    read_spec = RunSpec(READ, topic, await bench.topic("verdicts-read"), dlq,
                        bench.name("group-read"), NO_JUDGE_URL)
    read = (await _measure(bench, read_spec, count, timeout_s)).figures()
    judge = await start_judge(bench, 0.0)
    try:
        verdicts = await bench.topic("verdicts-spans")
        spec = RunSpec(WORKER, topic, verdicts, dlq, bench.name("group-spans"), judge.url,
                       concurrency=judge_concurrency, env=assembly.env())
        # The ceiling loop before and after the worker: the machine's speed drifts over
        # minutes here, and the worker is set against the two runs around it.
        loops = [await _ceiling_loop(bench, spec, count, timeout_s, judge)]
        calls = (await judge.stats())["count"]
        worker = (await _measure(bench, spec, count, timeout_s)).figures()
        worker["judge_calls"] = (await judge.stats())["count"] - calls
        loops.append(await _ceiling_loop(bench, spec, count, timeout_s, judge))
    finally:
        await judge.stop()
    async with OffsetWatch(bench.bootstrap, verdicts) as watch:
        worker["verdicts"] = await watch.count()
    worker["verdicts_expected"] = judged_traces(count)
    loop = loops_together(loops)
    decode = span_ceiling.decode_cost(sample)
    judging, made = await span_ceiling.judge_path_cost(
        bench, span_ceiling.traces_of(sample[: CYCLE * 10]), calls=1000,
        concurrency=judge_concurrency,
    )
    publishing = await span_ceiling.publish_cost(bench, made, calls=2000,
                                                 concurrency=judge_concurrency)
    judged_per_record = JUDGED_PER_CYCLE / CYCLE
    parts = {
        "read_ms": read["cpu_ms_per_record"],
        **decode,
        "judged_per_record": judged_per_record,
        **judging,
        **publishing,
    }
    ceiling = span_ceiling.ceiling(read["cpu_ms_per_record"], decode["decode_ms"],
                                   judged_per_record, judging["verdict_ms"])
    with_publish = span_ceiling.ceiling(read["cpu_ms_per_record"], decode["decode_ms"],
                                        judged_per_record, judging["verdict_ms"],
                                        publishing["publish_ms"])
    return {
        "assembly": assembly.env(),
        "judge_concurrency": judge_concurrency,
        "read": read,
        "worker": worker,
        "ceiling_loop": loop,
        "ratio_to_read": _ratio(worker["records_per_s"], read["records_per_s"]),
        "ceiling": {
            "parts": parts,
            "records_per_cpu_s": round(ceiling, 1),
            "with_publish_records_per_cpu_s": round(with_publish, 1),
            "decode_alone_records_per_s": round(1000 / decode["decode_ms"], 1),
            "read_and_decode_records_per_s": round(
                1000 / (read["cpu_ms_per_record"] + decode["decode_ms"]), 1),
        },
        # The worker's records per CPU-second against the ceiling's: how much more than its
        # unavoidable parts it spends; and its wall rate against the ceiling.
        "ratio_to_ceiling": _ratio(worker["records_per_cpu_s"], ceiling),
        # The same against the ceiling that counts each verdict's publishing as a part.
        "ratio_to_ceiling_with_publish": _ratio(worker["records_per_cpu_s"], with_publish),
        "wall_ratio_to_ceiling": _ratio(worker["records_per_s"], ceiling),
        # The worker against the same parts run as a loop, measured as the worker is
        # (``ceiling_loop.py``): per CPU-second, and in wall time.
        "ratio_to_ceiling_loop": _ratio(worker["records_per_cpu_s"], loop["records_per_cpu_s"]),
        "wall_ratio_to_ceiling_loop": _ratio(worker["records_per_s"], loop["records_per_s"]),
    }


async def _ceiling_loop(bench: Bench, worker: RunSpec, count: int, timeout_s: float,
                        judge: Judge) -> dict[str, Any]:
    """One run of the ceiling loop (``ceiling_loop.py``) as the worker ran, on its own group
    and verdicts topic."""
    verdicts = await bench.topic("verdicts-ceiling")
    spec = replace(worker, system=CEILING, verdicts_topic=verdicts,
                   group=bench.name("group-ceiling"))
    calls = (await judge.stats())["count"]
    measured = await _measure(bench, spec, count, timeout_s)
    figures = measured.figures()
    figures["decode_ms"] = decode_figure(measured.child.log_path.read_text())
    figures["judge_calls"] = (await judge.stats())["count"] - calls
    async with OffsetWatch(bench.bootstrap, verdicts) as watch:
        figures["verdicts"] = await watch.count()
    figures["verdicts_expected"] = judged_traces(count)
    return figures


def loops_together(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs of the ceiling loop as one: their records over their CPU time and over the time
    they took; each run kept (``runs``) to show how far the machine drifted between them."""
    records = sum(run["records"] for run in runs)
    cpu_s = sum(run["cpu_s"] for run in runs)
    took_s = sum(run["records"] / run["records_per_s"] for run in runs)
    decodes = [run["decode_ms"] for run in runs if run["decode_ms"] is not None]
    return {
        "records_per_s": round(records / took_s, 1),
        "spans_per_s": round(sum(run["spans"] for run in runs) / took_s),
        "records_per_cpu_s": round(records / cpu_s, 1),
        "cpu_ms_per_record": round(cpu_s / records * 1000, 4),
        "decode_ms": round(sum(decodes) / len(decodes), 4) if decodes else None,
        "verdicts": min(run["verdicts"] for run in runs),
        "verdicts_expected": runs[0]["verdicts_expected"],
        "waited_for_cpu_share": max(run["waited_for_cpu_share"] or 0 for run in runs),
        "runs": runs,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a and b else None


async def memory(
    bench: Bench, topic: str, count: int, dlq: str, assembly: Assembly, *,
    judge_concurrency: int = 64, timeout_s: float = 600.0,
) -> dict[str, Any]:
    """The worker over ``count`` records, each a trace to judge, filling the assembly to
    ``max_open_traces`` and streaming the rest past it: RSS every second, its peak, its
    slope (after the first fifth of the run) and its growth from one half to the next."""
    judge = await start_judge(bench, 0.0)
    try:
        verdicts = await bench.topic("verdicts-memory")
        spec = RunSpec(WORKER, topic, verdicts, dlq, bench.name("group-memory"), judge.url,
                       concurrency=judge_concurrency, env=assembly.env())
        run = await _measure(bench, spec, count, timeout_s, sample_rss=True)
    finally:
        await judge.stop()
    progress, child = run.progress, run.child
    assert progress.stable_at is not None
    since = progress.stable_at - child.started_at
    rss = [(round(t - since, 1), round(mb, 1)) for t, mb in child.rss_samples if t >= since]
    committed = [(round(at - progress.stable_at, 2), n) for at, n in progress.samples]
    figures = run.figures()
    return {
        "assembly": assembly.env(),
        "records": count,
        "spans": count * SPANS_PER_RECORD,
        "finished": figures["finished"],
        "elapsed_s": figures["elapsed_s"],
        "records_per_s": figures["records_per_s"],
        "peak_rss_mb": run.peak_rss_mb,
        "rss_slope_mb_per_min": _slope_per_min(rss),
        **halves(rss),
        "most_open_traces": _most_open(child),
        "rss_mb": rss,
        "committed": committed[:: max(1, len(committed) // 200)],
        "log": figures["log"],
    }


def halves(rss: list[tuple[float, float]]) -> dict[str, float | None]:
    """The RSS peak over the first and the second half of the run, and the growth between
    them. With the default settings the assembly fills, pauses, closes its traces in a burst
    and fills again, so RSS is a saw: a least-squares slope depends on where the run stops
    in a tooth, while a second half that peaks no higher than the first is flat."""
    if len(rss) < 4:
        return {"first_half_peak_mb": None, "second_half_peak_mb": None, "growth_mb": None}
    middle = rss[-1][0] / 2
    first = max(mb for t, mb in rss if t < middle)
    second = max(mb for t, mb in rss if t >= middle)
    return {"first_half_peak_mb": first, "second_half_peak_mb": second,
            "growth_mb": round(second - first, 1)}


def _most_open(child: Child) -> int | None:
    """The most open traces the worker reported when it paused (its ``partitions_paused``
    log lines): whether the assembly reached ``MAX_OPEN_TRACES``. A diagnostic only."""
    most = None
    for line in child.log_path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "partitions_paused" and event.get("open_traces") is not None:
            most = max(most or 0, int(event["open_traces"]))
    return most


async def delay(
    bench: Bench, *, records_per_s: float, count: int, assembly: Assembly,
    judge_latency_s: float, judge_concurrency: int = 64,
) -> dict[str, Any]:
    """Spans produced live at ``records_per_s``; per judged trace, its verdict's append time
    minus its last record's, less ``quiet_s`` and the judge's latency: the excess."""
    spans_topic = await bench.topic("spans-live", SPAN_PARTITIONS, LOG_APPEND_TIME)
    verdicts = await bench.topic("verdicts-delay", 1, LOG_APPEND_TIME)
    dlq = await bench.topic("dlq-delay")
    judge = await start_judge(bench, judge_latency_s)
    spec = RunSpec(WORKER, spans_topic, verdicts, dlq, bench.name("group-delay"), judge.url,
                   concurrency=judge_concurrency, env=assembly.env())
    child = start_system(bench, spec)
    expected = judged_traces(count)
    try:
        async with GroupWatch(bench.bootstrap, spec.group, spans_topic) as watch:
            while not await watch.stable():
                if not child.alive():
                    raise RuntimeError(f"the worker exited early:\n{child.log_tail()}")
                await asyncio.sleep(0.05)
        last_append = await produce_live(bench.bootstrap, spans_topic,
                                         records(count, seed=11), records_per_s)
        async with OffsetWatch(bench.bootstrap, verdicts) as out:
            deadline = time.monotonic() + assembly.max_wait_s + 30
            while await out.count() < expected and time.monotonic() < deadline:
                if not child.alive():
                    raise RuntimeError(f"the worker exited early:\n{child.log_tail()}")
                await asyncio.sleep(0.2)
    finally:
        await child.stop()
        await judge.stop()
    stamped = await verdict_times(bench.bootstrap, verdicts, values=True)
    excess = sorted(excess_delays(stamped, last_append, assembly.quiet_s + judge_latency_s))
    return {
        "assembly": assembly.env(),
        "judge_latency_s": judge_latency_s,
        "records_per_s": records_per_s,
        "records": count,
        "verdicts": len(stamped),
        "verdicts_expected": expected,
        "matched": len(excess),
        "excess_p50_s": percentile(excess, 0.50),
        "excess_p95_s": percentile(excess, 0.95),
        "excess_max_s": round(excess[-1], 3) if excess else None,
        "excess_min_s": round(excess[0], 3) if excess else None,
        "log": str(child.log_path),
    }


def excess_delays(
    verdicts: Iterable[tuple[float, bytes | None]], last_append: dict[str, float],
    expected_s: float,
) -> list[float]:
    """Per verdict of a known trace: seconds from its trace's last record to it, less
    ``expected_s`` (the quiet time and the judge's latency)."""
    excess = []
    for at, value in verdicts:
        trace_id = json.loads(value or b"{}").get("trace_id")
        if trace_id in last_append:
            excess.append(at - last_append[trace_id] - expected_s)
    return excess


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile of sorted ``values`` (nearest rank), rounded to the millisecond."""
    if not values:
        return None
    return round(values[min(len(values) - 1, max(0, round(q * len(values)) - 1))], 3)


async def produce_live(
    bootstrap: str, topic: str, spans: Iterable[SpanRecord], records_per_s: float
) -> dict[str, float]:
    """Produce ``spans`` at a steady rate, each sent at once (linger 0); the broker's append
    time (seconds) of each trace's last record, by hex trace id."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1,
                                max_request_size=4 * 1024 * 1024)
    await producer.start()
    last: dict[str, float] = {}
    sent: list[tuple[str, asyncio.Future[Any]]] = []
    try:
        started = time.monotonic()
        for i, record in enumerate(spans):
            wait = started + i / records_per_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            future = await producer.send(topic, record.value, key=record.key)
            sent.append((record.key.decode(), future))
        for trace_id, future in sent:
            meta = await future
            last[trace_id] = max(last.get(trace_id, 0.0), meta.timestamp / 1000)
    finally:
        await producer.stop()
    return last
