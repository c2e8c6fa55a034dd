"""``SpanPath`` on its own: what it shares among the partitions it owns, and how many closed
traces it takes to the judge at once."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

from structlog.testing import capture_logs

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
from tests.support.span_pipeline import ANSWER, P0, rag_spans


def _path(limits: AssemblyLimits) -> SpanPath:
    evaluator = Evaluator(GatedJudge(), 0.5, Limits())
    rules = RuleSet.groundedness(evaluator)
    return SpanPath(RecordPath(ListSink(), rules), rules, OTLP_PROTO, limits,
                    OffsetTracker[Hashable](), Tasks(), max_judging=64)


def _bounds(path: SpanPath, partitions: list[TP]) -> set[int]:
    return {path._assemblies[tp.partition].remembered_at_most for tp in partitions}


def test_the_worker_shares_its_bound_on_remembered_ids_among_its_partitions() -> None:
    path = _path(AssemblyLimits(max_remembered_ids=12_000))
    partitions = [TP("spans", n) for n in range(4)]
    for tp in partitions:
        path.assigned(tp)
    assert _bounds(path, partitions) == {3_000}
    path.forget(partitions[0])
    assert _bounds(path, partitions[1:]) == {4_000}
    many = [TP("spans", n) for n in range(4, 40)]
    for tp in many:
        path.assigned(tp)
    assert _bounds(path, many) == {1_000}  # never below the floor, however many partitions


class LateClock:
    """Every record came at 0 s, and it is an hour later now: every trace is due."""

    def arrival(self, partition: Hashable, offset: int, timestamp_ms: int) -> float:
        return 0.0

    def now(self, partition: Hashable) -> float:
        return 3600.0

    def at_end(self, partition: Hashable) -> bool:
        return False

    def caught_up(self, partition: Hashable) -> bool:
        return True


async def test_traces_closed_at_once_are_taken_to_the_judge_a_few_at_a_time() -> None:
    judge, tracker, tasks, sink = GatedJudge(), OffsetTracker[Hashable](), Tasks(), ListSink()
    rules = RuleSet.groundedness(Evaluator(judge, 0.5, Limits()))
    path = SpanPath(RecordPath(sink, rules), rules, OTLP_PROTO, AssemblyLimits(), tracker,
                    tasks, LateClock(), max_judging=2)
    offsets = tracker.partition(P0)
    path.assigned(P0)
    path.accept(P0, offsets, [Rec(P0.topic, P0.partition, n, 0, None,
                                  otlp_proto(rag_spans(f"Question {n}?")), [])
                              for n in range(5)])
    assert path.close_due() == 5  # one timer tick closes them all

    await asyncio.sleep(0.05)
    assert len(judge.started) == 2, "only two requests built and sent; three traces wait"
    judge.open(ANSWER)
    await asyncio.gather(*tasks[P0])
    assert len(judge.started) == 5
    assert len(sink.verdicts) == 5
    assert offsets.watermark() == 5  # every record's outcome acknowledged


def test_partitions_dealt_without_their_pair_are_named_in_one_warning() -> None:
    evaluator = Evaluator(GatedJudge(), 0.5, Limits())
    rules = RuleSet.groundedness(evaluator)
    path = SpanPath(RecordPath(ListSink(), rules), rules, OTLP_PROTO, AssemblyLimits(),
                    OffsetTracker[Hashable](), Tasks(), max_judging=8, logs_topic="logs")
    paired = [TP("spans", 0), TP("logs", 0), TP("spans", 2), TP("logs", 2)]
    assert path.unpaired(paired) == []
    with capture_logs() as logs:
        alone = path.unpaired([*paired, TP("spans", 1), TP("logs", 3)])
    assert alone == [TP("logs", 3), TP("spans", 1)]
    assert [entry["event"] for entry in logs] == ["partitions_not_copartitioned"]


class PairClock:
    """Each partition's present and whether it is read to its end, as a test sets them."""

    def __init__(self) -> None:
        self.times: dict[Hashable, float] = {}
        self.ends: set[Hashable] = set()

    def arrival(self, partition: Hashable, offset: int, timestamp_ms: int) -> float:
        return timestamp_ms / 1000

    def now(self, partition: Hashable) -> float:
        return self.times.get(partition, float("-inf"))

    def at_end(self, partition: Hashable) -> bool:
        return False

    def caught_up(self, partition: Hashable) -> bool:
        return partition in self.ends


def _pair_path(clock: PairClock) -> SpanPath:
    """A span path over a spans and a logs topic, on ``clock``."""
    rules = RuleSet.groundedness(Evaluator(GatedJudge(), 0.5, Limits()))
    return SpanPath(RecordPath(ListSink(), rules), rules, OTLP_PROTO, AssemblyLimits(),
                    OffsetTracker[Hashable](), Tasks(), clock, max_judging=8, logs_topic="logs")


def test_a_pairs_present_is_its_slower_topics_unless_that_one_is_read_to_its_end() -> None:
    clock = PairClock()
    path = _pair_path(clock)
    spans, logs = TP("spans", 0), TP("logs", 0)
    path.assigned(spans)
    assert path.now(0) == float("-inf")
    clock.times[spans] = 100.0
    assert path.now(0) == 100.0, "one topic assigned: its time"
    path.assigned(logs)
    assert path.now(0) == float("-inf"), "the logs not read yet: no trace may close"
    clock.ends.add(logs)
    assert path.now(0) == 100.0, "a quiet logs topic read to its end holds nothing back"
    clock.times[logs], clock.ends = 40.0, set()
    assert path.now(0) == 40.0, "an hour behind on the logs: their time"
    clock.ends = {spans, logs}
    assert path.now(0) == 100.0, "both read to their ends: the later"
    assert path.now(0, logs, 45.0) == 45.0, "a record being added is not read past yet"


def test_a_topic_whose_fetched_records_wait_their_turn_holds_its_pairs_time() -> None:
    """One fetch brings both topics: while the spans are added, the logs partition reads as
    read to its end (aiokafka's position is past them), yet its records are still to come."""
    clock = PairClock()
    path = _pair_path(clock)
    spans, logs = TP("spans", 0), TP("logs", 0)
    path.assigned(spans)
    path.assigned(logs)
    clock.times, clock.ends = {spans: 100.0, logs: 40.0}, {spans, logs}
    path.fetched([spans, logs])
    assert path.now(0, spans, 100.0) == 40.0, "the logs still to add: their time"
    path.accept(logs, path_offsets(path, logs), [])
    assert path.now(0) == 100.0, "added: read to its end again"


def path_offsets(path: SpanPath, tp: TP) -> PartitionOffsets:
    return path._tracker.partition(tp)


def test_a_topic_read_far_ahead_of_its_pair_is_held_until_the_other_nears() -> None:
    """An hour of backlog: the spans are read to 3,600 s while the logs stand at 0 s."""
    clock = PairClock()
    path = _pair_path(clock)
    spans, logs = TP("spans", 0), TP("logs", 0)
    owned = {spans, logs}
    path.assigned(spans)
    assert path.ahead(owned) == set(), "a pair of one topic holds nothing"
    path.assigned(logs)
    clock.times = {spans: 3_600.0, logs: 0.0}
    assert path.ahead(owned) == {spans}
    clock.times[logs] = 3_580.0  # within 30 s, but not yet within half of it
    assert path.ahead(owned) == {spans}, "let go only once the other is within 15 s"
    clock.times[logs] = 3_590.0
    assert path.ahead(owned) == set()
    clock.times = {spans: 7_200.0, logs: 3_600.0}
    clock.ends = {logs}
    assert path.ahead(owned) == set(), "the other read to its end: nothing to wait for"
    assert path.ahead({spans}) == set(), "only pairs owned whole"
