"""Replaying a span topic without a broker: the log's time (``LogClock``), the window read on
past its stop while its traces are open and from a lead-in before its start, and the real
pipeline over an in-memory log, judging or (a dry run) counting: what the live worker judges
for a trace that straddles ``--to``, nothing for one begun before ``--from`` or still being
written at the topic's end, and the same counts for a dry run as for the replay."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

import pytest
import structlog
from opentelemetry.sdk.trace import ReadableSpan

from consumer.cost.pricing import FALLBACK_PRICE, Prices
from consumer.inputs.formats import OTLP_PROTO
from consumer.judge.prompt import Limits
from consumer.pipeline.pipeline import Pipeline, PipelineConfig
from consumer.pipeline.progress import Commitment
from consumer.replay.dry_run import (
    DryRun,
    DryRunPrices,
    EstimatingJudge,
    NullSink,
    TraceCounter,
)
from consumer.replay.spans import read_log
from consumer.replay.window import Window, WindowConsumer
from consumer.rules.groundedness.evaluator import Evaluator
from consumer.rules.rule_set import RuleSet
from consumer.telemetry.assembly import AssemblyCounts, AssemblyLimits
from consumer.telemetry.clock import LogClock
from tests.support.otel_spans import otlp_proto
from tests.support.pipeline_fakes import TP, GatedJudge, ListSink, Rec
from tests.support.span_pipeline import ANSWER, Harness, hex_trace_id, rag_spans
from tests.support.waiting import until

P0, P1 = TP("spans", 0), TP("spans", 1)
GARBAGE = b"\xff\x00 not protobuf"
LONG_AGO = 1_000_000.0  # seconds since the epoch: a replay that started long after the log
FALLBACK = DryRunPrices(Prices(0.15, 0.15), FALLBACK_PRICE)


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


def span_window(log: dict[TP, list[Rec]], stops: dict[TP, int],
                starts: dict[TP, int] | None = None) -> Window:
    """The window ``[start, stop)`` of each partition (from 0 unless ``starts``), read on to
    the end of its log, with a lead-in from offset 0."""
    starts = starts or {}
    return Window({tp: (starts.get(tp, 0), stops[tp]) for tp in log}, asyncio.Event(),
                  ends={tp: len(records) for tp, records in log.items()},
                  leads=dict.fromkeys(log, 0))


# -- LogClock -------------------------------------------------------------------------------


async def test_each_partition_keeps_the_time_of_its_own_latest_record() -> None:
    window = Window({P0: (0, 5), P1: (0, 5)}, asyncio.Event(), ends={P0: 9, P1: 9})
    clock = LogClock(window, LONG_AGO)
    assert clock.now(P0) == -math.inf
    assert clock.arrival(P0, 0, 5_000) == 5.0
    assert clock.arrival(P0, 1, 4_000) == 4.0  # a producer's clock behind: time stays at 5
    assert clock.arrival(P1, 0, 900_000) == 900.0  # another partition read far ahead
    assert (clock.now(P0), clock.now(P1)) == (5.0, 900.0)
    assert clock.arrival(P0, 2, -1) == 5.0  # no timestamp: the partition's latest


async def test_at_its_end_a_partitions_present_is_when_the_replay_started() -> None:
    """Not +inf: a trace still being written then must not be taken for a finished one."""
    log = {P0: log_of(P0, (1_000, b"a"), (2_000, b"b"))}
    window = span_window(log, {P0: 1})
    clock = LogClock(window, 60.0)
    await WindowConsumer(LogReader(log), window).getmany()  # both records handed on; end reached
    clock.arrival(P0, 0, 1_000)
    assert (clock.now(P0), clock.at_end(P0)) == (1.0, False), "record 1 is not added yet"
    clock.arrival(P0, 1, 2_000)
    assert (clock.now(P0), clock.at_end(P0)) == (60.0, True)
    assert LogClock(window, 1.5).now(P0) == -math.inf, "nothing added: not at its end"


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
    await window.commit({P0: Commitment(3, "")})
    assert not window.stop.is_set(), "record 3 (an open trace's) is not done"
    await window.commit({P0: Commitment(4, "")})
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
    await window.commit({P0: Commitment(3, "")})
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


async def test_a_lead_in_is_read_first_and_counts_as_none_of_the_windows_records() -> None:
    log = {P0: log_of(P0, *((n, b"r") for n in range(6)))}
    window = Window({P0: (2, 4)}, asyncio.Event(), ends={P0: 6}, leads={P0: 0})
    assert window.leads() == {P0: 0}
    assert window.starts() == {P0: 2}
    reader = LogReader(log)
    consumer = WindowConsumer(reader, window)
    assert [r.offset for r in (await consumer.getmany())[P0]] == list(range(6))
    assert (window.records, window.read_on) == (2, 2)
    await window.commit({P0: Commitment(1, "")})
    assert window.completed == 0, "the lead-in is not the window's progress"
    await window.commit({P0: Commitment(6, "")})
    assert window.stop.is_set()
    assert window.completed == window.total == 2


async def test_an_empty_window_reads_no_lead_in() -> None:
    window = Window({P0: (3, 3)}, asyncio.Event(), ends={P0: 9}, leads={P0: 0})
    assert window.leads() == {P0: 3}
    window.check()
    assert window.stop.is_set()


# -- the replay's pipeline over an in-memory log, judging or counting ------------------------


@dataclass
class Replayed:
    """What one replay over an in-memory log did."""

    pipeline: Pipeline
    sink: ListSink
    window: Window
    counter: TraceCounter | None  # a dry run's
    counts: AssemblyCounts


async def replay_in_memory(
    log: dict[TP, list[Rec]], stops: dict[TP, int], *, starts: dict[TP, int] | None = None,
    started_at: float = LONG_AGO, dry_run: bool = False, max_in_flight: int = 4,
    max_uncommitted: int = 1_000, **limits: Any,
) -> Replayed:
    """The real pipeline on the window, as ``groundedness replay`` wires it (the uncommitted
    window wide, as the span formats' is)."""
    window = span_window(log, stops, starts)
    reader = LogReader(log)
    for tp, offset in window.leads().items():
        reader.seek(tp, offset)
    reader.pause(*[tp for tp in log if window.is_parked(tp)])
    consumer = WindowConsumer(reader, window)
    judge, sink = GatedJudge(), ListSink()
    judge.open(ANSWER)
    config = PipelineConfig(max_in_flight=max_in_flight, max_uncommitted=max_uncommitted,
                            commit_interval_s=0, fetch_timeout_ms=5, input_format=OTLP_PROTO,
                            assembly=AssemblyLimits(**limits))
    # A dry run's rules judge with the estimating judge, and the counter takes them through.
    evaluator = Evaluator(EstimatingJudge("none") if dry_run else judge, 0.5, Limits())
    rules = RuleSet.groundedness(evaluator)
    counter = TraceCounter(DryRun(rules, FALLBACK)) if dry_run else None
    pipeline = Pipeline(consumer, NullSink() if dry_run else sink, rules, window.commit, config)
    span_path = read_log(pipeline, consumer, window, started_at, counter)
    await pipeline.on_partitions_assigned(set(log))
    await asyncio.wait_for(pipeline.run(window.stop), 10)
    assert window.complete
    return Replayed(pipeline, sink, window, counter, span_path.counts)


def two_records(spans: list[ReadableSpan]) -> tuple[bytes, bytes]:
    """The trace's first three spans (2 DB, retriever), then the rest (LLM, chain, HTTP root)."""
    return otlp_proto(spans[:3]), otlp_proto(spans[3:])


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
    replayed = await replay_in_memory(log, {P0: 1}, quiet_s=0.05, max_wait_s=30.0)

    [live_verdict], [verdict] = live.sink.verdicts, replayed.sink.verdicts
    assert verdict.trace_id == hex_trace_id(straddling), "judged once; the later trace not"
    fields = ("verdict_id", "trace_id", "span_id", "assembly", "source", "context_source")
    assert {f: getattr(verdict, f) for f in fields} == {
        f: getattr(live_verdict, f) for f in fields}
    assert verdict.assembly is not None
    assert (verdict.assembly.spans, verdict.assembly.closed_by) == (3, "quiet")
    assert replayed.pipeline.outcomes == {"pass": 1}


async def test_a_trace_begun_before_from_is_judged_only_by_the_window_of_its_first_span(
) -> None:
    """Its tail alone, judged by a window starting mid-trace, would replace its verdict (the
    same verdict id) with a partial one."""
    straddling, inside = rag_spans("Who wrote Dune?"), rag_spans("Who wrote Emma?")
    first, rest = two_records(straddling)
    log = {P0: log_of(P0, (0, first), (2_000, rest), (2_500, otlp_proto(inside)))}

    later = await replay_in_memory(log, {P0: 3}, starts={P0: 1}, quiet_s=10.0,
                                   max_wait_s=60.0)
    assert later.sink.published == [hex_trace_id(inside)]
    assert later.counts == AssemblyCounts(spans_kept=3, spans_dropped=3, closed_quiet=1)
    assert (later.window.records, later.window.read_on) == (2, 0)

    earlier = await replay_in_memory(log, {P0: 1}, quiet_s=10.0, max_wait_s=60.0)
    [whole] = earlier.sink.verdicts
    assert whole.trace_id == hex_trace_id(straddling)
    assert whole.assembly is not None
    assert whole.assembly.spans == 3


@pytest.mark.parametrize(("started_at", "judged"), [(20.0, False), (LONG_AGO, True)],
                         ids=["written-as-the-replay-started", "to-well-in-the-past"])
async def test_a_trace_still_open_when_the_replay_started_is_left_to_the_live_worker(
    started_at: float, judged: bool
) -> None:
    """At the topic's end the present is the replay's start: a trace without its root whose
    max wait (60 s) had not passed then was still being written, and is not judged whole by
    the replay from what it has; one long finished closes as it did live."""
    whole, writing = rag_spans("Who wrote Dune?"), rag_spans("Who wrote Emma?")
    log = {P0: log_of(P0, (0, otlp_proto(whole)), (1_000, otlp_proto(writing[:4])))}
    for dry_run in (False, True):
        replayed = await replay_in_memory(log, {P0: 2}, started_at=started_at, dry_run=dry_run,
                                          quiet_s=10.0, max_wait_s=60.0)
        counts = replayed.counts
        assert (counts.closed_quiet, counts.closed_max_wait) == (1, int(judged))
        assert counts.open_at_end == int(not judged)
        judged_now = (replayed.counter.dry.would_judge if replayed.counter
                      else len(replayed.sink.verdicts))
        assert judged_now == 1 + int(judged)


async def test_a_replay_closes_traces_by_the_logs_time_however_fast_it_reads() -> None:
    """Records written 20 s apart are read in one fetch: the trace still closes as it did
    live, quiet before the span that came too late for it."""
    whole, rootless = rag_spans("Who wrote Dune?"), rag_spans("A?")
    log = {P0: log_of(P0, (0, otlp_proto(whole)), (3_000, otlp_proto(rootless[:3])),
                      (20_000, otlp_proto(whole[2:3])))}
    replayed = await replay_in_memory(log, {P0: 3}, quiet_s=10.0, max_wait_s=15.0)
    [verdict] = replayed.sink.verdicts
    assert verdict.assembly is not None
    assert (verdict.assembly.spans, verdict.assembly.closed_by) == (3, "quiet")
    assert replayed.pipeline.outcomes == {"pass": 1, "no_candidate": 1}
    assert replayed.counts.late_spans == 1


async def test_the_dry_run_counts_the_windows_traces_whole_and_nothing_past_it() -> None:
    straddling, rootless, after = rag_spans("A?"), rag_spans("C?")[:-1], rag_spans("B?")
    a1, a2 = two_records(straddling)
    log = {P0: log_of(P0, (1_000, a1), (1_100, GARBAGE), (1_200, otlp_proto(rootless)),
                      (1_500, a2), (2_000, otlp_proto(after)), (2_100, GARBAGE))}
    dry = await replay_in_memory(log, {P0: 3}, dry_run=True, quiet_s=10.0, max_wait_s=120.0)

    assert dry.counter is not None
    counted = dry.counter.dry
    assert (counted.would_judge, counted.left_out["skipped"]) == (2, 0)
    assert dry.pipeline.outcomes == {"dead_lettered": 1}, "the window's garbage alone"
    assert counted.estimated_tokens > 2 * 400
    assert dry.counter.no_candidate == 0
    assert dry.counts == AssemblyCounts(spans_kept=6, spans_dropped=5, closed_quiet=1,
                                        closed_max_wait=1)
    assert (dry.window.records, dry.window.read_on) == (3, 3)


async def test_the_dry_run_closes_traces_in_log_time_and_a_late_span_is_late() -> None:
    whole, rootless = rag_spans("D?"), rag_spans("A?")
    log = {P0: log_of(P0, (0, otlp_proto(whole)), (3_000, otlp_proto(rootless[:3])),
                      (20_000, otlp_proto(whole[2:3])))}  # read at once, written 20 s apart
    dry = await replay_in_memory(log, {P0: 3}, dry_run=True, quiet_s=10.0, max_wait_s=15.0)
    # By 20 s, D was quiet (from 10 s) and A (no root) had waited its 15 s: both closed
    # before the third record, whose span of D is late.
    counts = dry.counts
    assert (counts.closed_quiet, counts.closed_max_wait, counts.late_spans) == (1, 1, 1)
    assert counts.spans_kept == 3 + 1
    assert dry.counter is not None
    assert (dry.counter.dry.would_judge, dry.counter.no_candidate) == (1, 1)  # A: a retriever


def interleaved(traces: int) -> list[Rec]:
    """Traces 10 ms apart, each in two records 5 s apart (retriever, then LLM and root): in
    the log's time about 500 are open at once, far more than ``MAX_OPEN_TRACES``."""
    entries = []
    for n in range(traces):
        first, rest = two_records(rag_spans(f"Q{n}?"))
        entries += [(10 * n, first), (10 * n + 5_000, rest)]
    entries.sort(key=lambda entry: entry[0])
    return log_of(P0, *entries)


async def test_past_max_open_traces_the_dry_run_counts_what_the_replay_judges() -> None:
    """One way to close early, whatever the batch sizes: the dry run's fetches are not the
    replay's (``max_in_flight``: its traces are judged two at a time), and the counts agree."""
    log = {P0: interleaved(24)}
    stop = {P0: len(log[P0])}
    dry = await replay_in_memory(log, stop, dry_run=True, max_in_flight=64, quiet_s=10.0,
                                 max_wait_s=60.0, max_open_traces=6)
    judged = await replay_in_memory(log, stop, max_in_flight=2, quiet_s=10.0, max_wait_s=60.0,
                                    max_open_traces=6)

    assert dry.counts == judged.counts
    assert dry.counts.closed_early > 0
    assert dry.counter is not None
    assert dry.counter.dry.would_judge == len(judged.sink.verdicts)
    assert dry.counter.no_candidate == judged.pipeline.outcomes["no_candidate"] > 0


async def test_a_replay_past_max_open_traces_closes_the_next_due_without_pausing() -> None:
    """Log time passes only as records are read; fetching must not pause at the limit and
    wait for a clock that cannot run: the traces due next close as records come instead."""
    log = {P0: log_of(P0, *((n, otlp_proto(rag_spans(f"Q{n}?")[:-1])) for n in range(5)))}
    with structlog.testing.capture_logs() as logs:
        replayed = await replay_in_memory(log, {P0: 5}, max_open_traces=2, max_wait_s=60.0)
    assert len(replayed.sink.verdicts) == 5
    assert replayed.counts.closed_early == 3, "all but the last two, which close at the end"
    assert [e for e in logs if e["event"] == "partitions_paused"] == []


@pytest.mark.parametrize("dry_run", [False, True], ids=["replay", "dry-run"])
async def test_a_replay_whose_uncommitted_window_fills_behind_an_open_trace_finishes(
    dry_run: bool,
) -> None:
    """A rootless trace holds its partition's watermark; the records behind it fill the
    window, fetching pauses and log time stands still: every open trace closes early."""
    rootless, others = rag_spans("Held?")[:-1], [rag_spans(f"Q{n}?") for n in range(6)]
    entries = [(0, otlp_proto(rootless))] + [(n + 1, otlp_proto(s)) for n, s in enumerate(others)]
    replayed = await replay_in_memory({P0: log_of(P0, *entries)}, {P0: 7}, dry_run=dry_run,
                                      max_uncommitted=4, quiet_s=3_600.0, max_wait_s=7_200.0)
    judged = (replayed.counter.dry.would_judge if replayed.counter
              else len(replayed.sink.verdicts))
    assert judged == 7
    assert replayed.counts.closed_early >= 1


@pytest.mark.parametrize(("start", "stop"), [(0, 0), (0, 2), (2, 3)],
                         ids=["empty-window", "garbage-only-past-the-stop", "garbage-in-lead-in"])
async def test_garbage_outside_the_window_is_not_its_to_dead_letter(start: int, stop: int
                                                                    ) -> None:
    log = {P0: log_of(P0, (0, GARBAGE), (1, GARBAGE), (2, GARBAGE), (3, GARBAGE))}
    replayed = await replay_in_memory(log, {P0: stop}, starts={P0: start})
    assert [offset for offset, _ in replayed.sink.dead] == list(range(start, stop))
    assert sum(replayed.pipeline.outcomes.values()) == stop - start
