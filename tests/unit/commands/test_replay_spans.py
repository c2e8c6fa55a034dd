"""Replaying a span topic without a broker: the log's time (``LogClock``), the window read on
past its stop while its traces are open, the dry run's counts, and the real pipeline over an
in-memory log, judging what the live worker judges for a trace that straddles ``--to``."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from consumer.commands.replay_spans import LogClock, SpanDryRun
from consumer.commands.replay_window import Window, WindowConsumer
from consumer.evaluate import Evaluator
from consumer.judge.prompt import Limits
from consumer.stream.pipeline import Pipeline, PipelineConfig
from consumer.telemetry.assembly import AssemblyCounts, AssemblyLimits
from tests.support.otel_spans import otlp_proto
from tests.support.pipeline_fakes import TP, GatedJudge, ListSink, Rec
from tests.support.span_pipeline import ANSWER, Harness, hex_trace_id, rag_spans
from tests.support.waiting import until

P0, P1 = TP("spans", 0), TP("spans", 1)
GARBAGE = b"\xff\x00 not protobuf"


def rec(tp: TP, offset: int, timestamp_ms: int, value: bytes) -> Rec:
    return Rec(tp.topic, tp.partition, offset, timestamp_ms, None, value, [])


def log_of(tp: TP, *entries: tuple[int, bytes]) -> list[Rec]:
    """A partition's records at offsets 0, 1, ...: (timestamp ms, value) each."""
    return [rec(tp, offset, ts, value) for offset, (ts, value) in enumerate(entries)]


class LogReader:
    """A group-less consumer over an in-memory log: a fetch position per partition, pauses."""

    def __init__(self, log: dict[TP, list[Rec]]) -> None:
        self.log = log
        self.positions = dict.fromkeys(log, 0)
        self.paused: set[TP] = set()

    async def getmany(self, *partitions: Any, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[Any, list[Any]]:
        for tp, records in self.log.items():
            batch = [r for r in records if r.offset >= self.positions[tp]][: max_records or 500]
            if batch and tp not in self.paused:
                self.positions[tp] = batch[-1].offset + 1
                return {tp: batch}
        await asyncio.sleep(timeout_ms / 1000)
        return {}

    async def position(self, partition: Any) -> int:
        return self.positions[partition]

    def assignment(self) -> set[Any]:
        return set(self.log)

    def pause(self, *partitions: Any) -> None:
        self.paused |= set(partitions)

    def resume(self, *partitions: Any) -> None:
        self.paused -= set(partitions)

    def seek(self, partition: Any, offset: int) -> None:
        self.positions[partition] = offset


def span_window(log: dict[TP, list[Rec]], stops: dict[TP, int]) -> Window:
    """The window ``[0, stop)`` of each partition, read on to the end of its log."""
    return Window({tp: (0, stops[tp]) for tp in log}, asyncio.Event(),
                  ends={tp: len(records) for tp, records in log.items()})


# -- LogClock -------------------------------------------------------------------------------


async def test_each_partition_keeps_the_time_of_its_own_latest_record() -> None:
    window = Window({P0: (0, 5), P1: (0, 5)}, asyncio.Event(), ends={P0: 9, P1: 9})
    clock = LogClock(window)
    assert clock.now(P0) == -math.inf
    assert clock.arrival(P0, 0, 5_000) == 5.0
    assert clock.arrival(P0, 1, 4_000) == 4.0  # a producer's clock behind: time stays at 5
    assert clock.arrival(P1, 0, 900_000) == 900.0  # another partition read far ahead
    assert (clock.now(P0), clock.now(P1)) == (5.0, 900.0)
    assert clock.arrival(P0, 2, -1) == 5.0  # no timestamp: the partition's latest


async def test_time_runs_out_only_once_every_record_to_the_end_was_added() -> None:
    log = {P0: log_of(P0, (1_000, b"a"), (2_000, b"b"))}
    window = span_window(log, {P0: 1})
    reader = LogReader(log)
    clock = LogClock(window)
    await WindowConsumer(reader, window).getmany()  # both records handed on; end reached
    clock.arrival(P0, 0, 1_000)
    assert clock.now(P0) == 1.0, "record 1 is handed on but not added yet"
    clock.arrival(P0, 1, 2_000)
    assert clock.now(P0) == math.inf


# -- the window on a span topic -------------------------------------------------------------


async def test_past_its_stop_a_partition_is_read_on_to_its_end_until_its_records_are_done(
) -> None:
    log = {P0: log_of(P0, *((n, b"r") for n in range(6)))}
    window = Window({P0: (0, 2)}, asyncio.Event(), ends={P0: 4})
    reader = LogReader(log)
    consumer = WindowConsumer(reader, window)

    assert [r.offset for r in (await consumer.getmany())[P0]] == [0, 1, 2, 3]
    assert window.is_reached(P0)
    assert window.is_parked(P0), "read to its end"
    assert reader.paused == {P0}
    assert (window.records, window.read_on) == (2, 2)
    await window.commit({P0: 3})
    assert not window.stop.is_set(), "record 3 (an open trace's) is not done"
    await window.commit({P0: 4})
    assert window.stop.is_set()
    assert window.completed == window.total == 2


async def test_a_partition_whose_traces_all_closed_is_parked_before_its_end() -> None:
    log = {P0: log_of(P0, *((n, b"r") for n in range(10)))}
    window = Window({P0: (0, 2)}, asyncio.Event(), ends={P0: 10})
    reader = LogReader(log)
    consumer = WindowConsumer(reader, window)
    await consumer.getmany(max_records=3)
    assert window.is_reached(P0)
    assert not window.is_parked(P0)
    assert reader.paused == set(), "still reading: records 0-2 are not done"
    await window.commit({P0: 3})
    assert window.stop.is_set()
    assert await consumer.getmany() == {}
    assert reader.paused == {P0}
    assert reader.positions[P0] == 3, "nothing past the last trace was read"


@pytest.mark.parametrize(("open_traces", "read_to"), [(0, 2), (1, 4)],
                         ids=["no-trace-open", "a-trace-open"])
async def test_past_its_stop_a_partition_is_read_only_while_a_trace_is_open(
    open_traces: int, read_to: int
) -> None:
    """Its records may still be being judged (not done): it is not read on for them."""
    log = {P0: log_of(P0, *((n, b"r") for n in range(10)))}
    window = Window({P0: (0, 2)}, asyncio.Event(), ends={P0: 10})
    reader = LogReader(log)
    consumer = WindowConsumer(reader, window)
    consumer.open_traces = lambda tp: open_traces
    await consumer.getmany(max_records=2)
    await consumer.getmany(max_records=2)
    assert reader.positions[P0] == read_to
    assert (P0 in reader.paused) is (open_traces == 0)
    consumer.resume(P0)
    assert (P0 in reader.paused) is (open_traces == 0), "the pipeline resumes it not"


async def test_a_fetch_while_the_pipeline_holds_the_partitions_paused_is_reported() -> None:
    window = Window({P0: (0, 5)}, asyncio.Event(), ends={P0: 9})
    consumer = WindowConsumer(LogReader({P0: []}), window)
    held: list[bool] = []
    consumer.on_held_fetch = lambda: held.append(True)
    await consumer.getmany()
    consumer.pause(P0)  # backpressure
    await consumer.getmany()
    await consumer.getmany()
    consumer.resume(P0)
    await consumer.getmany()
    assert held == [True, True]


# -- the dry run ----------------------------------------------------------------------------


def two_records(spans: list[ReadableSpan]) -> tuple[bytes, bytes]:
    """The trace's first three spans (2 DB, retriever), then the rest (LLM, chain, HTTP root)."""
    return otlp_proto(spans[:3]), otlp_proto(spans[3:])


async def dry_run(log: dict[TP, list[Rec]], stops: dict[TP, int],
                  limits: AssemblyLimits, max_uncommitted: int = 1_000) -> tuple[SpanDryRun,
                                                                                 Window]:
    window = span_window(log, stops)
    dry = SpanDryRun("otlp_proto", limits, Limits(), window, max_uncommitted)
    consumer = WindowConsumer(LogReader(log), window)
    consumer.open_traces = dry.open_on
    for _ in range(20):
        for tp, records in (await consumer.getmany(max_records=2)).items():
            dry.read(tp, records)
        dry.close_due()
        await window.commit(dry.watermarks())
        if window.stop.is_set():
            return dry, window
    raise AssertionError("the dry run never finished")


async def test_the_dry_run_counts_the_windows_traces_whole_and_nothing_past_it() -> None:
    straddling, rootless, after = rag_spans("A?"), rag_spans("C?")[:-1], rag_spans("B?")
    a1, a2 = two_records(straddling)
    log = {P0: log_of(P0, (1_000, a1), (1_100, GARBAGE), (1_200, otlp_proto(rootless)),
                      (1_500, a2), (2_000, otlp_proto(after)), (2_100, GARBAGE))}
    dry, window = await dry_run(log, {P0: 3}, AssemblyLimits(quiet_s=10.0, max_wait_s=120.0))

    assert (dry.dry.would_judge, dry.dry.skipped, dry.dry.dead_lettered) == (2, 0, 1)
    assert dry.dry.estimated_tokens > 2 * 400
    assert dry.no_candidate == 0
    assert dry.counts == AssemblyCounts(spans_kept=6, spans_dropped=5, closed_quiet=1,
                                        closed_max_wait=1)
    assert (window.records, window.read_on) == (3, 3)


async def test_the_dry_run_closes_traces_in_log_time_and_a_late_span_is_late() -> None:
    whole, rootless = rag_spans("D?"), rag_spans("A?")
    log = {P0: log_of(P0, (0, otlp_proto(whole)), (3_000, otlp_proto(rootless[:3])),
                      (20_000, otlp_proto(whole[2:3])))}  # read at once, written 20 s apart
    dry, _ = await dry_run(log, {P0: 3}, AssemblyLimits(quiet_s=10.0, max_wait_s=15.0))
    # By 20 s, D was quiet (from 10 s) and A (no root) had waited its 15 s: both closed
    # before the third record, whose span of D is late.
    counts = dry.counts
    assert (counts.closed_quiet, counts.closed_max_wait, counts.late_spans) == (1, 1, 1)
    assert counts.spans_kept == 3 + 1
    assert (dry.dry.would_judge, dry.no_candidate) == (1, 1)  # A: a retriever alone


async def test_a_dry_run_over_max_open_traces_closes_the_next_due_early() -> None:
    log = {P0: log_of(P0, *((n, otlp_proto(rag_spans(f"Q{n}?")[:-1])) for n in range(4)))}
    dry, _ = await dry_run(log, {P0: 4}, AssemblyLimits(max_open_traces=2))
    assert dry.dry.would_judge == 4
    assert dry.counts.closed_early >= 1
    assert dry.counts.closed_max_wait == 4


async def test_a_dry_run_whose_uncommitted_window_fills_closes_every_open_trace() -> None:
    rootless = otlp_proto(rag_spans("Held?")[:-1])
    entries = [(0, rootless)] + [(n, otlp_proto(rag_spans(f"Q{n}?"))) for n in range(1, 7)]
    dry, _ = await dry_run({P0: log_of(P0, *entries)}, {P0: 7},
                           AssemblyLimits(quiet_s=3_600.0, max_wait_s=7_200.0), max_uncommitted=4)
    assert dry.dry.would_judge == 7
    assert dry.counts.closed_early >= 1


# -- the replay's pipeline over an in-memory log --------------------------------------------


async def replay_in_memory(log: dict[TP, list[Rec]], stops: dict[TP, int],
                           **limits: Any) -> tuple[Pipeline, ListSink]:
    """The real pipeline on the window, as ``groundedness replay`` wires it."""
    window = span_window(log, stops)
    reader = LogReader(log)
    reader.pause(*[tp for tp in log if window.is_parked(tp)])
    consumer = WindowConsumer(reader, window)
    judge, sink = GatedJudge(), ListSink()
    judge.open(ANSWER)
    config = PipelineConfig(max_in_flight=4, commit_interval_s=0, fetch_timeout_ms=5,
                            spans="otlp_proto", assembly=AssemblyLimits(**limits))
    pipeline = Pipeline(consumer, sink, Evaluator(judge, 0.5, Limits()), window.commit, config)
    assert pipeline.span_path is not None
    pipeline.span_path.read_log(LogClock(window), window.stops())
    consumer.open_traces = pipeline.span_path.open_on
    consumer.on_held_fetch = pipeline.span_path.close_stalled
    await pipeline.on_partitions_assigned(set(log))
    await asyncio.wait_for(pipeline.run(window.stop), 10)
    assert window.complete
    return pipeline, sink


async def test_replay_and_live_judge_a_trace_straddling_to_alike() -> None:
    straddling, after = rag_spans("Who wrote Dune?"), rag_spans("Who wrote Emma?")
    first, rest = two_records(straddling)

    live = Harness(quiet_s=0.05)
    live.judge.open(ANSWER)
    live.consumer.feed(P0, first, rest)
    await live.start()
    await until(lambda: len(live.sink.verdicts) == 1)
    await live.stop()

    # --to falls between the trace's two records (offset 1), and another trace starts after.
    log = {P0: log_of(P0, (0, first), (10, rest), (20, otlp_proto(after)))}
    pipeline, sink = await replay_in_memory(log, {P0: 1}, quiet_s=0.05, max_wait_s=30.0)

    [live_verdict], [replayed] = live.sink.verdicts, sink.verdicts
    assert replayed.trace_id == hex_trace_id(straddling), "judged once; the later trace not"
    fields = ("verdict_id", "trace_id", "span_id", "assembly", "source", "context_source")
    assert {f: getattr(replayed, f) for f in fields} == {
        f: getattr(live_verdict, f) for f in fields}
    assert replayed.assembly is not None
    assert (replayed.assembly.spans, replayed.assembly.closed_by) == (3, "quiet")
    assert pipeline.outcomes == {"pass": 1}


async def test_a_replay_closes_traces_by_the_logs_time_however_fast_it_reads() -> None:
    """Records written 20 s apart are read in one fetch: the trace still closes as it did
    live, quiet before the span that came too late for it."""
    whole, rootless = rag_spans("Who wrote Dune?"), rag_spans("A?")
    log = {P0: log_of(P0, (0, otlp_proto(whole)), (3_000, otlp_proto(rootless[:3])),
                      (20_000, otlp_proto(whole[2:3])))}
    pipeline, sink = await replay_in_memory(log, {P0: 3}, quiet_s=10.0, max_wait_s=15.0)
    [verdict] = sink.verdicts
    assert verdict.assembly is not None
    assert (verdict.assembly.spans, verdict.assembly.closed_by) == (3, "quiet")
    assert pipeline.outcomes == {"pass": 1, "no_candidate": 1}
    assert pipeline.span_path is not None
    assert pipeline.span_path.counts.late_spans == 1


async def test_a_replay_past_max_open_traces_closes_traces_early_instead_of_hanging() -> None:
    """Log time passes only as records are read; with the open traces full, fetching pauses
    and nothing would close them: the replay closes the next due instead."""
    log = {P0: log_of(P0, *((n, otlp_proto(rag_spans(f"Q{n}?")[:-1])) for n in range(5)))}
    pipeline, sink = await replay_in_memory(log, {P0: 5}, max_open_traces=1, max_wait_s=60.0)
    assert len(sink.verdicts) == 5
    assert pipeline.span_path is not None
    assert pipeline.span_path.counts.closed_early >= 1


async def test_a_replay_whose_uncommitted_window_fills_behind_an_open_trace_finishes() -> None:
    """A rootless trace holds its partition's watermark; the records behind it fill the
    window, fetching pauses and log time stands still: every open trace closes early."""
    rootless, others = rag_spans("Held?")[:-1], [rag_spans(f"Q{n}?") for n in range(6)]
    entries = [(0, otlp_proto(rootless))] + [(n + 1, otlp_proto(s)) for n, s in enumerate(others)]
    log = {P0: log_of(P0, *entries)}
    window = span_window(log, {P0: 7})
    reader = LogReader(log)
    consumer = WindowConsumer(reader, window)
    judge, sink = GatedJudge(), ListSink()
    judge.open(ANSWER)
    config = PipelineConfig(max_in_flight=4, max_uncommitted=4, commit_interval_s=0,
                            fetch_timeout_ms=5, spans="otlp_proto",
                            assembly=AssemblyLimits(quiet_s=3_600.0, max_wait_s=7_200.0))
    pipeline = Pipeline(consumer, sink, Evaluator(judge, 0.5, Limits()), window.commit, config)
    assert pipeline.span_path is not None
    pipeline.span_path.read_log(LogClock(window), window.stops())
    consumer.open_traces = pipeline.span_path.open_on
    consumer.on_held_fetch = pipeline.span_path.close_stalled
    await pipeline.on_partitions_assigned({P0})
    await asyncio.wait_for(pipeline.run(window.stop), 10)
    assert len(sink.verdicts) == 7
    assert pipeline.span_path.counts.closed_early >= 1


@pytest.mark.parametrize("stop", [0, 2], ids=["empty-window", "garbage-only-past-the-stop"])
async def test_garbage_past_the_stop_is_not_the_windows_to_dead_letter(stop: int) -> None:
    log = {P0: log_of(P0, (0, GARBAGE), (1, GARBAGE), (2, GARBAGE))}
    pipeline, sink = await replay_in_memory(log, {P0: stop})
    assert [offset for offset, _ in sink.dead] == list(range(stop))
    assert sum(pipeline.outcomes.values()) == stop
