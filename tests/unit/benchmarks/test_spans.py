"""The span benchmarks' pure parts: the records they produce, and the arithmetic of their figures.

The benchmarks themselves run outside the test suite (``make bench``). What these pin is that
the records are what the figures claim (100 spans, 95% without GenAI content, one trace per
record keyed by its id, decoded by the worker's own decoder into the kept and dropped counts
the scenarios count on), and the formulas the rates, the delays and the targets come from.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import pytest

from benchmarks.ceiling_loop import close_with_roots, decode_figure
from benchmarks.group_watch import Progress
from benchmarks.span_ceiling import ceiling, traces_of
from benchmarks.span_records import (
    CYCLE,
    DENSE_GENAI_SPANS,
    GENAI_PER_CYCLE,
    JUDGED_PER_CYCLE,
    SPANS_PER_RECORD,
    dense_records,
    records,
)
from benchmarks.span_scenarios import (
    excess_delays,
    halves,
    judged_traces,
    loops_together,
    percentile,
)
from benchmarks.targets import span_rows
from consumer.inputs.otlp.decode import decode_otlp
from consumer.telemetry.conventions import map_trace
from consumer.telemetry.spans import Span


def test_a_cycle_is_a_thousand_spans_of_which_95_percent_carry_no_genai_content() -> None:
    cycle = list(records(CYCLE))
    decoded = [decode_otlp(record.value, "otlp_proto") for record in cycle]
    assert [len(d.kept) + d.dropped for d in decoded] == [SPANS_PER_RECORD] * CYCLE
    kept = sum(len(d.kept) for d in decoded)
    assert kept == GENAI_PER_CYCLE == sum(record.genai_spans for record in cycle)
    assert kept / (CYCLE * SPANS_PER_RECORD) == 0.05
    assert all(d.invalid == 0 for d in decoded)
    # By kind, as the worker's decoder sees them: kept GenAI spans and dropped others.
    by_kind = {record.kind: (len(d.kept), d.dropped)
               for record, d in zip(cycle, decoded, strict=True)}
    assert by_kind == {"rag_head": (9, 91), "rag_tail": (11, 89), "agent": (30, 70),
                       "plain": (0, 100)}


def test_records_weigh_about_34_kb() -> None:
    sizes = [len(record.value) for record in records(CYCLE * 3)]
    assert 32_000 <= sum(sizes) / len(sizes) <= 36_000


def test_each_record_is_one_trace_keyed_by_its_hex_id() -> None:
    for record in records(CYCLE * 2):
        decoded = decode_otlp(record.value, "otlp_proto")
        assert list(decoded.spans_per_trace) == [record.key.decode()]
        assert decoded.spans_per_trace[record.key.decode()] == SPANS_PER_RECORD


def test_the_rag_trace_spans_two_records_and_its_root_comes_with_the_second() -> None:
    cycle = list(records(CYCLE))
    head, tail = cycle[0], cycle[4]
    assert (head.kind, tail.kind) == ("rag_head", "rag_tail")
    assert head.key == tail.key
    assert decode_otlp(head.value, "otlp_proto").roots_seen == set()
    assert decode_otlp(tail.value, "otlp_proto").roots_seen == {tail.key.decode()}


def test_every_cycle_brings_new_trace_ids() -> None:
    keys = Counter(record.key for record in records(CYCLE * 5))
    # Per cycle: the RAG trace twice (head and tail), eight other traces once.
    assert sorted(Counter(keys.values()).items()) == [(1, 8 * 5), (2, 5)]


@pytest.mark.parametrize("count", [CYCLE, 3, 8, 13, 2 * CYCLE + 9])
def test_judged_traces_counts_the_traces_the_mapping_judges(count: int) -> None:
    values = [record.value for record in records(count)]
    candidates = [spans for spans in traces_of(values) if map_trace(spans) is not None]
    assert judged_traces(count) == len(candidates)
    if count % CYCLE == 0:
        assert judged_traces(count) == count // CYCLE * JUDGED_PER_CYCLE


def test_dense_records_are_whole_traces_each_to_judge() -> None:
    dense = list(dense_records(5))
    assert len({record.key for record in dense}) == 5
    for record in dense:
        decoded = decode_otlp(record.value, "otlp_proto")
        assert (len(decoded.kept), decoded.dropped) == (DENSE_GENAI_SPANS,
                                                        SPANS_PER_RECORD - DENSE_GENAI_SPANS)
        assert decoded.roots_seen == {record.key.decode()}
        mapped = map_trace(decoded.kept)
        assert mapped is not None
        assert mapped.has_answer


def test_rates_run_from_assignment_and_from_the_first_commit_to_the_last() -> None:
    progress = Progress(total=1000, stable_at=10.0, done_at=14.0,
                        samples=[(10.0, 0), (11.0, 200), (12.0, 500), (14.0, 1000)])
    assert progress.rate() == 250.0  # 1000 records in 4 s
    assert progress.steady_rate() == pytest.approx(800 / 3)  # 800 more in the last 3 s
    assert progress.first_commit_at == 11.0
    assert Progress(total=1000, stable_at=10.0).rate() is None


def test_excess_is_the_delay_beyond_quiet_and_judge_for_known_traces_only() -> None:
    verdicts = [(12.7, b'{"trace_id": "a"}'), (20.0, b'{"trace_id": "b"}'),
                (30.0, b'{"trace_id": "other"}')]
    excess = excess_delays(verdicts, {"a": 10.0, "b": 17.4}, expected_s=2.5)
    assert excess == pytest.approx([0.2, 0.1])


def test_flatness_compares_the_peaks_of_the_two_halves() -> None:
    saw = [(0.0, 100.0), (1.0, 250.0), (2.0, 120.0), (3.0, 240.0), (4.0, 255.0), (5.0, 130.0)]
    assert halves(saw) == {"first_half_peak_mb": 250.0, "second_half_peak_mb": 255.0,
                           "growth_mb": 5.0}
    assert halves(saw[:3])["growth_mb"] is None  # too short to say


def test_the_ceiling_loop_closes_every_judged_trace_with_all_its_kept_spans() -> None:
    cycles = 3
    values = [record.value for record in records(CYCLE * cycles)]
    open_traces: dict[str, list[Span]] = {}
    closed = [spans for value in values
              for spans in close_with_roots(open_traces, decode_otlp(value, "otlp_proto"))]
    assert not open_traces  # every trace with GenAI spans ends with its root here
    judged = [spans for spans in closed if map_trace(spans) is not None]
    assert len(judged) == judged_traces(CYCLE * cycles) == JUDGED_PER_CYCLE * cycles
    def ids(traces: Iterable[Sequence[Span]]) -> list[list[str]]:
        return sorted([span.span_id for span in spans] for spans in traces)

    assert ids(closed) == ids(traces_of(values))


def test_the_ceiling_loops_decoding_figure_is_read_from_its_last_words() -> None:
    log = 'aiokafka: connected\n{"decode_ms_in_loop": 0.2012, "records": 20000}\nbye\n'
    assert decode_figure(log) == 0.2012
    assert decode_figure("the loop died before its stop\n") is None


def test_the_ceiling_loops_around_the_worker_count_as_one_run_of_both() -> None:
    def run(cpu_s: float, rate: float, decode_ms: float | None) -> dict[str, Any]:
        return {"records": 20_000, "spans": 2_000_000, "cpu_s": cpu_s, "records_per_s": rate,
                "spans_per_s": rate * 100, "decode_ms": decode_ms, "verdicts": 4000,
                "verdicts_expected": 4000, "waited_for_cpu_share": 0.01}

    both = loops_together([run(10.0, 1800, 0.2), run(15.0, 1200, None)])
    assert both["records_per_cpu_s"] == 1600  # 40,000 records in 25 CPU-s, not (2000+1333)/2
    assert both["cpu_ms_per_record"] == 0.625
    assert both["records_per_s"] == 1440  # 40,000 records in 11.1 + 16.7 s, not (1800+1200)/2
    assert both["spans_per_s"] == 144_000
    assert both["decode_ms"] == 0.2  # the run that printed it
    assert [r["cpu_s"] for r in both["runs"]] == [10.0, 15.0]


def test_percentile_is_the_nearest_rank() -> None:
    values = [0.01 * n for n in range(1, 101)]
    assert percentile(values, 0.5) == 0.5
    assert percentile(values, 0.95) == 0.95
    assert percentile([0.3], 0.95) == 0.3
    assert percentile([], 0.5) is None


def test_the_ceiling_adds_up_what_one_core_spends_per_record() -> None:
    # 0.1 ms read + 0.25 decode + 0.2 traces x 1.25 ms judge path = 0.6 ms a record
    assert ceiling(0.1, 0.25, 0.2, 1.25) == pytest.approx(1000 / 0.6)


def _span_results(worker_rate: float, read_rate: float, per_cpu: float,
                  peak_mb: float, max_excess: float) -> dict[str, Any]:
    run = {"records_per_s": worker_rate, "spans_per_s": int(worker_rate * 100),
           "records_per_cpu_s": per_cpu, "cpu_ms_per_record": 1000 / per_cpu,
           "waited_for_cpu_share": 0.2, "verdicts": 400}
    parts = {"read_ms": 0.1, "decode_ms": 0.25, "parse_ms": 0.04, "judged_per_record": 0.2,
             "verdict_ms": 1.25, "map_ms": 0.3}
    return {
        "spans": {
            "worker": run,
            "read": {"records_per_s": read_rate, "spans_per_s": int(read_rate * 100)},
            "ceiling": {"parts": parts, "records_per_cpu_s": 1000 / 0.6},
            "ratio_to_read": worker_rate / read_rate,
            "ratio_to_ceiling": per_cpu / (1000 / 0.6),
            "wall_ratio_to_ceiling": worker_rate / (1000 / 0.6),
            "ceiling_loop": {"records_per_s": 1400, "records_per_cpu_s": 1600,
                             "cpu_ms_per_record": 0.625, "verdicts": 400},
            "ratio_to_ceiling_loop": per_cpu / 1600,
            "wall_ratio_to_ceiling_loop": worker_rate / 1400,
        },
        "spans_memory": {"peak_rss_mb": peak_mb, "rss_slope_mb_per_min": 16.0,
                         "first_half_peak_mb": peak_mb - 10, "growth_mb": 10.0,
                         "spans": 2_000_000, "finished": True, "most_open_traces": 10_000,
                         "assembly": {"MAX_OPEN_TRACES": "10000"}},
        "spans_delay": {"excess_p50_s": 0.02, "excess_p95_s": 0.05,
                        "excess_max_s": max_excess, "matched": 400, "verdicts_expected": 400,
                        "judge_latency_s": 0.5, "assembly": {"TRACE_QUIET_SECONDS": "2"}},
    }


def test_span_targets_are_ratios_against_their_bounds() -> None:
    rows = {row["target"]: row for row in span_rows(
        _span_results(worker_rate=1200, read_rate=8000, per_cpu=1530, peak_mb=240,
                      max_excess=0.6))}
    assert rows["span throughput"]["ratio"] == pytest.approx(0.15)
    assert rows["span throughput"]["met"] is False
    assert rows["span throughput, one-core ceiling"]["ratio"] == pytest.approx(0.918)
    assert rows["span throughput, one-core ceiling"]["met"] is True
    assert rows["span throughput, ceiling loop"]["ratio"] == pytest.approx(1530 / 1600)
    assert rows["span throughput, ceiling loop"]["met"] is True
    assert "1600/CPU-s" in rows["span throughput, ceiling loop"]["bound"]
    assert rows["span memory"]["ratio"] == 0.8
    assert rows["span memory"]["met"] is True  # grew 10 MB on 230: under 5%, saw or not
    assert rows["span delay"]["ratio"] == 1.2  # one trace 0.6 s over: not met
    assert rows["span delay"]["met"] is False
