"""``SpanPath`` on its own: what it shares among the partitions it owns."""

from __future__ import annotations

from collections.abc import Hashable

from consumer.evaluate import Evaluator
from consumer.judge.prompt import Limits
from consumer.rules.rule_set import RuleSet
from consumer.stream.offsets import OffsetTracker
from consumer.stream.record_path import RecordPath
from consumer.stream.span_path import SpanPath, Tasks
from consumer.telemetry.assembly import AssemblyLimits
from tests.support.pipeline_fakes import TP, GatedJudge, ListSink


def _path(limits: AssemblyLimits) -> SpanPath:
    evaluator = Evaluator(GatedJudge(), 0.5, Limits())
    rules = RuleSet.groundedness(evaluator)
    return SpanPath(RecordPath(ListSink(), rules), rules, "otlp_proto", limits,
                    OffsetTracker[Hashable](), Tasks())


def _bounds(path: SpanPath, partitions: list[TP]) -> set[int]:
    return {path._assemblies[tp].remembered_at_most for tp in partitions}


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
