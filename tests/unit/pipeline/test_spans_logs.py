"""The pipeline with a logs topic, on in-memory Kafka stand-ins: one fetch hands out both
topics' records at once (aiokafka's ``getmany`` does), the spans partition first, and
aiokafka's position says both are read to their end before either is added."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from consumer.inputs.formats import OTLP_PROTO
from consumer.judge.prompt import Limits
from consumer.pipeline.pipeline import Pipeline, PipelineConfig
from consumer.rules.groundedness.evaluator import Evaluator
from consumer.rules.rule_set import RuleSet
from consumer.telemetry.assembly import AssemblyLimits
from tests.support.genai_logs import LoggedChat, LoggedChats
from tests.support.pipeline_fakes import TP, Commits, GatedJudge, ListSink, Rec
from tests.support.waiting import until

SPANS, LOGS = TP("spans", 0), TP("logs", 0)
ANSWER = "Frank Herbert wrote Dune."


class OneFetch:
    """Every queued record in one ``getmany``, the spans partition's first."""

    def __init__(self) -> None:
        self.queued: dict[TP, list[Rec]] = {SPANS: [], LOGS: []}

    def feed(self, tp: TP, value: bytes, key: bytes, timestamp_ms: int) -> None:
        queue = self.queued[tp]
        queue.append(Rec(tp.topic, tp.partition, len(queue), timestamp_ms, key, value, []))

    async def getmany(self, *partitions: Any, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[Any, list[Any]]:
        batch = {tp: records for tp, records in self.queued.items() if records}
        self.queued = {SPANS: [], LOGS: []}
        if not batch:
            await asyncio.sleep(timeout_ms / 1000)
        return batch

    def assignment(self) -> set[Any]:
        return {SPANS, LOGS}

    def pause(self, *partitions: Any) -> None:
        pass

    def resume(self, *partitions: Any) -> None:
        pass

    def seek(self, partition: Any, offset: int) -> None:
        raise AssertionError("both partitions are handed over before fetching")


async def test_a_backlog_fetched_at_once_keeps_every_traces_log_records() -> None:
    consumer, judge, sink = OneFetch(), GatedJudge(), ListSink()
    judge.open(ANSWER)
    chats = LoggedChats()
    backlog: list[LoggedChat] = [chats.chat(f"Q{n}?", ANSWER) for n in range(20)]
    later = [chats.chat(f"Later {n}?", ANSWER) for n in range(2)]
    base_ms = int(time.time() * 1000) - 60_000
    for n, chat in enumerate(backlog):  # log records 0.8 s after their spans
        consumer.feed(SPANS, chat.spans_value(), chat.key, base_ms + 100 * n)
        consumer.feed(LOGS, chat.logs_value(), chat.key, base_ms + 100 * n + 800)
    for n, chat in enumerate(later):  # 10 s on: past every earlier trace's quiet
        consumer.feed(SPANS, chat.spans_value(), chat.key, base_ms + 10_000 + n)
        consumer.feed(LOGS, chat.logs_value(), chat.key, base_ms + 10_800 + n)
    config = PipelineConfig(
        max_in_flight=64, commit_interval_s=0, fetch_timeout_ms=5, input_format=OTLP_PROTO,
        logs_topic=LOGS.topic, assembly=AssemblyLimits(quiet_s=2.0, max_wait_s=30.0))
    pipeline = Pipeline(consumer, sink, RuleSet.groundedness(Evaluator(judge, 0.5, Limits())),
                        Commits(), config, read_to_end=lambda tp: True)
    await pipeline.on_partitions_assigned({SPANS, LOGS})
    stop = asyncio.Event()
    task = asyncio.create_task(pipeline.run(stop))
    try:
        await until(lambda: len(sink.verdicts) >= len(backlog), timeout_s=10)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    judged = {v.trace_id: v.verdict for v in sink.verdicts}
    assert {chat.trace_id: judged.get(chat.trace_id) for chat in backlog} == {
        chat.trace_id: "pass" for chat in backlog}, "every answer read from its log records"


class Backlog(OneFetch):
    """An hour of backlog, the logs topic heavier: each fetch brings every spans record but
    only ``logs_per_fetch`` log records; put back records are handed out again."""

    def __init__(self, logs_per_fetch: int) -> None:
        super().__init__()
        self.logs_per_fetch = logs_per_fetch
        self.position = {SPANS: 0, LOGS: 0}
        self.paused: set[TP] = set()
        self.all: dict[TP, list[Rec]] = {SPANS: [], LOGS: []}

    def feed(self, tp: TP, value: bytes, key: bytes, timestamp_ms: int) -> None:
        records = self.all[tp]
        records.append(Rec(tp.topic, tp.partition, len(records), timestamp_ms, key, value, []))

    async def getmany(self, *partitions: Any, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[Any, list[Any]]:
        batch = {}
        for tp, limit in ((SPANS, None), (LOGS, self.logs_per_fetch)):
            if tp in self.paused:
                continue
            start = self.position[tp]
            records = self.all[tp][start:start + limit if limit else None]
            if records:
                batch[tp] = records
                self.position[tp] = start + len(records)
        if not batch:
            await asyncio.sleep(timeout_ms / 1000)
        return batch

    def pause(self, *partitions: Any) -> None:
        self.paused |= set(partitions)

    def resume(self, *partitions: Any) -> None:
        self.paused -= set(partitions)

    def seek(self, partition: Any, offset: int) -> None:
        self.position[partition] = offset


async def _run_until(consumer: Backlog, sink: ListSink, judge: GatedJudge,
                     config: PipelineConfig, verdicts: int) -> None:
    """Run the pipeline on ``consumer`` until ``verdicts`` are published; the partitions read
    to their end when all their records are handed out and they are not paused."""

    def read_to_end(partition: Any) -> bool:
        return (partition not in consumer.paused
                and consumer.position[partition] >= len(consumer.all[partition]))

    pipeline = Pipeline(consumer, sink, RuleSet.groundedness(Evaluator(judge, 0.5, Limits())),
                        Commits(), config, read_to_end=read_to_end)
    await pipeline.on_partitions_assigned({SPANS, LOGS})
    stop = asyncio.Event()
    task = asyncio.create_task(pipeline.run(stop))
    try:
        await until(lambda: len(sink.verdicts) >= verdicts, timeout_s=20)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_a_topic_read_ahead_of_its_pair_is_put_back_not_held_open_to_capacity() -> None:
    consumer, judge, sink = Backlog(logs_per_fetch=6), GatedJudge(), ListSink()
    judge.open(ANSWER)
    chats = LoggedChats()
    backlog = [chats.chat(f"Q{n}?", ANSWER) for n in range(60)]
    base_ms = int(time.time() * 1000) - 3_600_000
    for n, chat in enumerate(backlog):  # a trace a minute; its log records 0.5 s after
        consumer.feed(SPANS, chat.spans_value(), chat.key, base_ms + 60_000 * n)
        consumer.feed(LOGS, chat.logs_value(), chat.key, base_ms + 60_000 * n + 500)
    config = PipelineConfig(
        max_in_flight=64, commit_interval_s=0, fetch_timeout_ms=5, input_format=OTLP_PROTO,
        logs_topic=LOGS.topic,
        assembly=AssemblyLimits(quiet_s=2.0, max_wait_s=30.0, max_open_traces=10))

    await _run_until(consumer, sink, judge, config, len(backlog) - 1)
    judged = {v.trace_id: v.verdict for v in sink.verdicts}
    assert [judged.get(chat.trace_id) for chat in backlog[:-1]] == ["pass"] * 59, (
        "none closed at MAX_OPEN_TRACES=10 before its log records came")


class OneTopicAFetch(Backlog):
    """Each fetch brings one topic's records only, the two in turn (aiokafka hands out what
    each partition's fetch has brought so far)."""

    def __init__(self) -> None:
        super().__init__(logs_per_fetch=1_000)
        self.turn = 0

    async def getmany(self, *partitions: Any, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[Any, list[Any]]:
        self.turn += 1
        tp = (SPANS, LOGS)[self.turn % 2]
        start = self.position[tp]
        records = [] if tp in self.paused else self.all[tp][start:]
        if not records:
            await asyncio.sleep(timeout_ms / 1000)
            return {}
        self.position[tp] = start + len(records)
        return {tp: records}


async def test_a_pair_fetched_one_topic_at_a_time_from_no_time_still_reads_on() -> None:
    """A new owner knows neither topic's time: putting back each in turn would read nothing."""
    consumer, judge, sink = OneTopicAFetch(), GatedJudge(), ListSink()
    judge.open(ANSWER)
    chats = LoggedChats()
    backlog = [chats.chat(f"Q{n}?", ANSWER) for n in range(8)]
    base_ms = int(time.time() * 1000) - 600_000
    for n, chat in enumerate(backlog):
        consumer.feed(SPANS, chat.spans_value(), chat.key, base_ms + 60_000 * n)
        consumer.feed(LOGS, chat.logs_value(), chat.key, base_ms + 60_000 * n + 500)
    config = PipelineConfig(
        max_in_flight=64, commit_interval_s=0, fetch_timeout_ms=5, input_format=OTLP_PROTO,
        logs_topic=LOGS.topic, assembly=AssemblyLimits(quiet_s=2.0, max_wait_s=30.0))

    await _run_until(consumer, sink, judge, config, len(backlog) - 1)
    assert {v.verdict for v in sink.verdicts} == {"pass"}
