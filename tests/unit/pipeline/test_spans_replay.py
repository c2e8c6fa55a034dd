"""The span path on a replay's clock: when a stalled replay may close traces early, and when
it must not (the pause would lift by itself, and closing then would make the verdicts
depend on how fast the judge answered); ``MAX_OPEN_TRACES`` held as records are added, by
closing the traces due next in the log's time; the traces still open at the log's end left
unjudged."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

import structlog

from consumer.inputs.formats import OTLP_PROTO
from consumer.judge.prompt import Limits
from consumer.pipeline.offsets import OffsetTracker, PartitionOffsets
from consumer.pipeline.records import RecordPath
from consumer.pipeline.spans import SpanPath, Tasks
from consumer.rules.groundedness.evaluator import Evaluator
from consumer.rules.rule_set import RuleSet
from consumer.telemetry.assembly import AssemblyLimits
from tests.support.otel_spans import otlp_proto
from tests.support.pipeline_fakes import TP, GatedJudge, ListSink, Rec
from tests.support.span_pipeline import ANSWER, rag_spans

P0, P1 = TP("spans", 0), TP("spans", 1)


class StoppedClock:
    """A replay's time, which does not pass while nothing is read: record n came at n s."""

    def arrival(self, partition: Hashable, offset: int, timestamp_ms: int) -> float:
        return float(offset)

    def now(self, partition: Hashable) -> float:
        return 1.0

    def at_end(self, partition: Hashable) -> bool:
        return False

    def caught_up(self, partition: Hashable) -> bool:
        return True


class TimestampClock:
    """A replay's time: each record's timestamp; a partition is at its end once told."""

    def __init__(self) -> None:
        self.latest: dict[Hashable, float] = {}
        self.ended: set[Hashable] = set()

    def arrival(self, partition: Hashable, offset: int, timestamp_ms: int) -> float:
        self.latest[partition] = timestamp_ms / 1000
        return timestamp_ms / 1000

    def now(self, partition: Hashable) -> float:
        return self.latest.get(partition, 0.0)

    def at_end(self, partition: Hashable) -> bool:
        return partition in self.ended

    def caught_up(self, partition: Hashable) -> bool:
        return True


def replaying_path(clock: StoppedClock | TimestampClock, max_open_traces: int = 10,
                   partitions: tuple[TP, ...] = (P0,)) -> tuple[SpanPath, OffsetTracker[Hashable],
                                                                Tasks, GatedJudge]:
    """A replay's span path, its windows [0, 100), no trace open yet."""
    judge, tracker, tasks = GatedJudge(), OffsetTracker[Hashable](), Tasks()
    evaluator = Evaluator(judge, 0.5, Limits())
    limits = AssemblyLimits(quiet_s=10.0, max_wait_s=60.0, max_open_traces=max_open_traces)
    rules = RuleSet.groundedness(evaluator)
    path = SpanPath(RecordPath(ListSink(), rules), rules, OTLP_PROTO, limits,
                    tracker, tasks, max_judging=64)
    path.read_log(clock, {tp: (0, 100) for tp in partitions})
    for tp in partitions:
        tracker.partition(tp)
        path.assigned(tp)
    return path, tracker, tasks, judge


def rootless(tp: TP, offset: int, timestamp_ms: int, question: str) -> Rec:
    """A record holding a trace without its root: it closes only by its max wait (60 s)."""
    spans = otlp_proto(rag_spans(question)[:-1])
    return Rec(tp.topic, tp.partition, offset, timestamp_ms, None, spans, [])


def stalled_path(max_open_traces: int = 10) -> tuple[SpanPath, OffsetTracker[Hashable], Tasks,
                                                     GatedJudge]:
    """A span path holding two open traces of partition 0 (records 0 and 1)."""
    path, tracker, tasks, judge = replaying_path(StoppedClock(), max_open_traces)
    path.accept(P0, offsets_of(tracker, P0), [rootless(P0, n, 0, f"Q{n}?") for n in range(2)])
    return path, tracker, tasks, judge


def offsets_of(tracker: OffsetTracker[Hashable], tp: TP) -> PartitionOffsets:
    offsets = tracker.current(tp)
    assert offsets is not None
    return offsets


async def settle(tasks: Tasks) -> None:
    """Cancel the closed traces' tasks (their judging is not what is tested)."""
    running = [task for group in tasks.values() for task in group]
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)


async def test_a_stall_closes_nothing_while_work_or_a_commit_can_still_lift_the_pause() -> None:
    path, tracker, tasks, judge = stalled_path()
    busy = asyncio.get_running_loop().create_future()
    tasks[P0] = {asyncio.ensure_future(busy)}
    assert path.close_stalled() == 0, "a trace being judged will free room"
    busy.cancel()
    await asyncio.gather(*tasks.pop(P0), return_exceptions=True)

    judge.holding = True
    assert path.close_stalled() == 0, "the judge is down: the pause is for it"
    judge.holding = False

    assert tracker.changed() == [P0]
    assert path.close_stalled() == 0, "a watermark waits to be committed"
    offsets_of(tracker, P0).committed(0, offsets_of(tracker, P0).snapshot)

    assert path.close_stalled() == 2, "only time could free it now: every open trace closes"
    assert path.open_traces == 0
    assert path.counts.closed_early == 2
    judge.open(ANSWER)
    await asyncio.wait_for(asyncio.gather(*tasks[P0]), 5)


async def test_at_max_open_traces_the_traces_due_next_close_at_once_over_the_partitions(
) -> None:
    """No pause and no crawl: as each record is added, the traces due next in the log's time
    close until the replay is back at the limit, whichever partition holds them."""
    path, tracker, tasks, _ = replaying_path(TimestampClock(), max_open_traces=2,
                                             partitions=(P0, P1))
    with structlog.testing.capture_logs() as logs:
        # Due by max wait, 60 s after they began: P0's at 60, 70, 80; P1's at 65, 75.
        path.accept(P0, offsets_of(tracker, P0),
                    [rootless(P0, n, n * 10_000, f"P0 {n}?") for n in range(3)])
        path.accept(P1, offsets_of(tracker, P1),
                    [rootless(P1, n, 5_000 + n * 10_000, f"P1 {n}?") for n in range(2)])
    # Closed as each record passes the limit: 60 (P0), then 65 (P1), then 70 (P0).
    assert (path.open_on(P0), path.open_on(P1)) == (1, 1), "due at 80 and 75 are left"
    assert (path.counts.closed_early, path.counts.closed_max_wait) == (3, 3)
    warnings = [entry for entry in logs if entry["event"] == "traces_closed_early"]
    assert len(warnings) == 1, "one warning for the lot; the summary counts them"
    await settle(tasks)


async def test_at_the_logs_end_traces_still_open_are_left_unjudged_and_their_records_done(
) -> None:
    clock = TimestampClock()
    path, tracker, tasks, judge = replaying_path(clock)
    offsets = offsets_of(tracker, P0)
    whole = Rec(P0.topic, P0.partition, 1, 1_000, None, otlp_proto(rag_spans("Whole?")), [])
    path.accept(P0, offsets, [rootless(P0, 0, 0, "Open?"), whole])
    clock.latest[P0] = 20.0  # the whole trace is quiet by then; the rootless one is not due
    clock.ended.add(P0)
    with structlog.testing.capture_logs() as logs:
        assert path.close_due() == 1
    assert path.open_traces == 0
    assert path.counts.open_at_end == 1
    assert [e["traces"] for e in logs if e["event"] == "traces_open_at_end"] == [1]
    judge.open(ANSWER)
    await asyncio.wait_for(asyncio.gather(*tasks[P0]), 5)
    assert judge.started == [ANSWER], "the whole trace alone is judged"
    assert offsets.watermark() == 2, "both records done: nothing holds the replay"
