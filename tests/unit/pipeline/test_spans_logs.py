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
