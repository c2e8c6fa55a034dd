"""The pipeline's commit order and backpressure, with in-memory stand-ins for Kafka."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from consumer.errors import PublishError
from consumer.judge.prompt import Limits
from consumer.ops.metrics import REGISTRY
from consumer.pipeline import records as record_path
from consumer.pipeline.pipeline import Pipeline, PipelineConfig
from consumer.pipeline.progress import Progress
from consumer.rules.groundedness.evaluator import Evaluator
from consumer.rules.groundedness.rule import Groundedness
from consumer.rules.missing_citation import MissingCitation
from consumer.rules.rule_set import RuleSet
from schemas.verdict import VerdictEvent
from tests.support.pipeline_fakes import Commits, GatedJudge, ListSink
from tests.support.waiting import until

TP = ("traces", 0)


@dataclass(frozen=True)
class FakeRecord:
    offset: int
    value: bytes | None
    topic: str = "traces"
    partition: int = 0
    timestamp: int = 0
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass
class FakeConsumer:
    """Hands out queued records of one partition, honouring pause and seek."""

    records: list[FakeRecord]
    position: int = 0
    paused: set[Any] = field(default_factory=set)
    seeks: list[int] = field(default_factory=list)

    async def getmany(self, *partitions: Any, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[Any, list[Any]]:
        await asyncio.sleep(0.001)
        if TP in self.paused or self.position >= len(self.records):
            return {}
        batch = self.records[self.position : self.position + (max_records or 1000)]
        self.position += len(batch)
        return {TP: batch}

    def assignment(self) -> set[Any]:
        return {TP}

    def pause(self, *partitions: Any) -> None:
        self.paused.update(partitions)

    def resume(self, *partitions: Any) -> None:
        self.paused.difference_update(partitions)

    def seek(self, partition: Any, offset: int) -> None:
        self.seeks.append(offset)
        self.position = offset


def record(offset: int, answer: str | None) -> FakeRecord:
    return FakeRecord(offset, json.dumps({"trace_id": f"t{offset}", "output": answer}).encode())


def build(records: list[FakeRecord], max_in_flight: int = 100, **config: Any) -> tuple[
        Pipeline, FakeConsumer, GatedJudge, ListSink, Commits]:
    consumer = FakeConsumer(records)
    judge = GatedJudge()
    sink = ListSink()
    commits = Commits()

    rules = RuleSet.groundedness(Evaluator(judge, 0.5, Limits()))
    pipeline = Pipeline(consumer, sink, rules, commits,
                        PipelineConfig(max_in_flight=max_in_flight, commit_interval_s=0,
                                       **config))
    return pipeline, consumer, judge, sink, commits


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.005)


async def test_watermark_commits_only_below_unfinished_records() -> None:
    pipeline, _, judge, sink, commits = build(
        [record(0, "a"), record(1, "b"), record(2, ""), record(3, None), FakeRecord(4, b"{")])
    await pipeline.on_partitions_assigned({TP})
    stop = asyncio.Event()
    run = asyncio.create_task(pipeline.run(stop))
    await settle()
    judge.open("b")  # finishes before offset 0
    await settle()
    assert sink.published == ["t1"]
    assert sink.dead == [(4, sink.dead[0][1])]
    assert all(c[TP] == 0 for c in commits), "offset 0 is unfinished: nothing past it commits"
    judge.open("a")
    await settle()
    assert commits[-1][TP] == 5
    assert pipeline.outcomes == {"pass": 2, "skipped": 2, "dead_lettered": 1}
    stop.set()
    await run


async def test_records_before_the_assignment_callback_are_put_back() -> None:
    pipeline, consumer, judge, sink, _ = build([record(0, "a"), record(1, "b")])
    judge.open("a", "b")
    stop = asyncio.Event()
    run = asyncio.create_task(pipeline.run(stop))
    await settle()
    assert consumer.seeks[:1] == [0]
    assert sink.verdicts == []
    await pipeline.on_partitions_assigned({TP})
    await settle()
    assert sorted(sink.published) == ["t0", "t1"]
    stop.set()
    await run


async def test_full_pipeline_pauses_and_resumes_at_half() -> None:
    pipeline, consumer, judge, _, _ = build([record(i, f"x{i}") for i in range(8)],
                                            max_in_flight=4)
    await pipeline.on_partitions_assigned({TP})
    stop = asyncio.Event()
    run = asyncio.create_task(pipeline.run(stop))
    await settle()
    assert consumer.position == 4
    assert TP in consumer.paused
    judge.open("x0", "x1")
    await settle()
    assert consumer.position == 6, "resumed at half full, then filled up to the bound again"
    judge.open(*(f"x{i}" for i in range(8)))
    await settle()
    assert consumer.position == 8
    stop.set()
    await run


async def test_judge_down_pauses_fetching() -> None:
    pipeline, consumer, judge, _, _ = build([record(0, "a")])
    judge.holding = True
    await pipeline.on_partitions_assigned({TP})
    stop = asyncio.Event()
    run = asyncio.create_task(pipeline.run(stop))
    await settle()
    assert TP in consumer.paused
    assert consumer.position == 0
    judge.holding = False
    judge.open("a")
    await settle()
    assert consumer.position == 1
    stop.set()
    await run


async def test_revoked_partition_drops_late_completions() -> None:
    pipeline, _, judge, _, commits = build([record(0, "slow"), record(1, "fast")])
    pipeline._config = PipelineConfig(max_in_flight=100, commit_interval_s=0,
                                      revoke_timeout_s=0.05)
    await pipeline.on_partitions_assigned({TP})
    stop = asyncio.Event()
    run = asyncio.create_task(pipeline.run(stop))
    judge.open("fast")
    await settle()
    await pipeline.on_partitions_revoked({TP})
    assert commits[-1][TP] == 0, "the revoke commits the watermark below the slow record"
    judge.open("slow")
    await settle()
    assert all(c[TP] == 0 for c in commits), "the cancelled record never commits"
    stop.set()
    await run


class RefusingSink(ListSink):
    """Refuses the verdicts of one rule until told to take them (a broker that times out)."""

    def __init__(self, refused_rule: str) -> None:
        super().__init__()
        self.refused_rule = refused_rule
        self.refusals = 0

    async def publish(self, verdict: VerdictEvent) -> None:
        if verdict.rule == self.refused_rule:
            self.refusals += 1
            raise PublishError("timed out")
        await super().publish(verdict)


async def test_a_record_commits_only_once_every_verdict_of_its_trace_is_acknowledged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(record_path, "PUBLISH_RETRY_S", (0.001, 0.001))
    judge = GatedJudge()
    judge.open("cited [1]")
    sink = RefusingSink("missing_citation")
    commits = Commits()

    trace = {"trace_id": "t0", "output": "cited [1]",
             "retrieved_documents": [{"id": "d1", "content": "a fact"}]}
    rules = RuleSet([Groundedness(Evaluator(judge, 0.5, Limits())), MissingCitation()])
    pipeline = Pipeline(FakeConsumer([FakeRecord(0, json.dumps(trace).encode())]), sink, rules,
                        commits, PipelineConfig(max_in_flight=10, commit_interval_s=0))
    await pipeline.on_partitions_assigned({TP})
    stop = asyncio.Event()
    run = asyncio.create_task(pipeline.run(stop))
    await settle()
    assert sink.refusals > 1
    assert [v.rule for v in sink.verdicts] == ["groundedness"]
    assert all(c[TP] == 0 for c in commits), "the citation verdict is not acknowledged yet"
    sink.refused_rule = ""
    await settle()
    assert sorted(v.rule for v in sink.verdicts) == ["groundedness", "missing_citation"]
    assert commits[-1][TP] == 1
    assert pipeline.verdicts_by_rule == {("groundedness", "pass"): 1,
                                         ("missing_citation", "pass"): 1}
    stop.set()
    await run


async def test_a_trace_no_rule_applies_to_is_counted_and_committed() -> None:
    sink = ListSink()
    commits = Commits()
    pipeline = Pipeline(FakeConsumer([record(0, "an answer, no documents"), record(1, "")]),
                        sink, RuleSet([MissingCitation()]), commits,
                        PipelineConfig(max_in_flight=10, commit_interval_s=0))
    await pipeline.on_partitions_assigned({TP})
    stop = asyncio.Event()
    run = asyncio.create_task(pipeline.run(stop))
    await settle()
    assert sink.verdicts == []
    assert pipeline.outcomes == {"not_applicable": 1, "skipped": 1}
    assert commits[-1][TP] == 2
    stop.set()
    await run


async def test_the_next_owner_skips_what_the_commit_says_is_done_and_redoes_the_rest() -> None:
    # A graceful hand-over with the first record's call still out: the commit stays at 0,
    # and its progress says 1-3 are done; the next owner judges 0 alone.
    records = [record(0, "slow"), record(1, "b"), record(2, "c"), record(3, "d")]
    pipeline, _, judge, sink, commits = build(records, revoke_timeout_s=0.1)
    judge.open("b", "c", "d")
    await pipeline.on_partitions_assigned({TP})
    stop = asyncio.Event()
    run = asyncio.create_task(pipeline.run(stop))
    await until(lambda: len(sink.verdicts) == 3)
    await pipeline.on_partitions_revoked({TP})  # bounded wait, then commits its progress
    stop.set()
    await run
    progress = commits.progress[TP]
    assert (commits[-1][TP], progress.fetched_to, progress.unfinished) == (0, 4, ((0, 1),))

    redone = _metric("groundedness_records_redone_total", reason="reread")
    skipped = _metric("groundedness_records_redone_total", reason="skipped_done")
    consumer, next_sink, next_judge, next_commits = FakeConsumer(records), ListSink(), \
        GatedJudge(), Commits()
    next_judge.open("slow", "b", "c", "d")

    async def read_progress(partitions: Any) -> dict[Any, Progress]:
        return {TP: progress}

    successor = Pipeline(consumer, next_sink, RuleSet.groundedness(
        Evaluator(next_judge, 0.5, Limits())), next_commits,
        PipelineConfig(max_in_flight=100, commit_interval_s=0), read_progress=read_progress)
    await successor.on_partitions_assigned({TP})
    stop = asyncio.Event()
    run = asyncio.create_task(successor.run(stop))
    await until(lambda: bool(next_commits) and next_commits[-1][TP] == 4)
    stop.set()
    await run
    assert next_sink.published == ["t0"], "1-3 were published by the previous owner"
    assert next_judge.started == ["slow"]
    assert _metric("groundedness_records_redone_total", reason="reread") == redone + 1
    assert _metric("groundedness_records_redone_total", reason="skipped_done") == skipped + 3


def _metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0
