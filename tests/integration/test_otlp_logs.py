"""``OTLP_LOGS_TOPIC`` through the real worker and a real broker: chat calls whose content is
only in log records (the OTel GenAI instrumentation's default), the spans on one topic and the
log records on another, both keyed by trace id with the same partition count.

Each trace is judged once from its log records, whichever topic's record comes first; a
restart reassembles a trace from both topics; three workers and a rebalance keep every
worker's partition numbers the same on both topics; different partition counts are refused at
start in one line."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from consumer.cli import main
from consumer.localjudge.server import JudgeServer
from scripts.kafka import broker
from tests.support.fake_judge import ScriptedJudge
from tests.support.genai_logs import LoggedChat, LoggedChats
from tests.support.otel_spans import otlp_proto
from tests.support.streams import Topics, group_offsets, in_process_worker, produce, read_all
from tests.support.workers import VerdictCollector, Worker, WorkerPool, wait_committed, worker_env

pytestmark = pytest.mark.integration

QUIET_S = "0.5"
# Five partitions: a number the 3 workers, then 2, do not divide, so an assignor that deals
# the topics' partitions round the members in one run would give a worker different numbers.
PARTITIONS = 5
ANSWER = "Frank Herbert wrote Dune."


def _chats(count: int, tag: str) -> list[LoggedChat]:
    chats = LoggedChats()
    return [chats.chat(f"{tag} question {n}: who wrote Dune?", ANSWER) for n in range(count)]


async def _topics(kafka: str, name: str, partitions: int, logs_partitions: int | None = None,
                  ) -> tuple[Topics, str]:
    topics = Topics.fresh(name)
    logs = f"logs-{topics.traces}"
    await broker.create_topics(kafka, {
        topics.traces: partitions, logs: logs_partitions or partitions,
        topics.verdicts: 1, topics.dlq: 1})
    return topics, logs


def _env(kafka: str, topics: Topics, logs: str, judge_url: str, **more: str) -> dict[str, str]:
    settings = {"TRACES_FORMAT": "otlp_proto", "OTLP_LOGS_TOPIC": logs,
                "TRACE_QUIET_SECONDS": QUIET_S, "TRACE_MAX_WAIT_SECONDS": "30"}
    return worker_env(topics.env(kafka), judge_url, **(settings | more))


async def test_each_trace_is_judged_once_from_its_log_records_whichever_topic_comes_first(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, server = fake_judge
    topics, logs = await _topics(kafka, "logs-join", partitions=3)
    chats = _chats(9, "join")
    early_logs, late_logs = chats[:5], chats[5:]
    # Some traces' log records reach Kafka before their spans (the logs pipeline flushed
    # first), the others after; one trace's records split over two log records.
    await produce(kafka, logs, [c.logs_value() for c in early_logs],
                  keys=[c.key for c in early_logs])
    await produce(kafka, topics.traces, [c.spans_value() for c in chats],
                  keys=[c.key for c in chats])
    split = late_logs[0]
    later = [split.logs_value(split.logs[:2]), split.logs_value(split.logs[2:]),
             *(c.logs_value() for c in late_logs[1:])]
    await produce(kafka, logs, later, keys=[split.key, split.key,
                                            *(c.key for c in late_logs[1:])])

    async with in_process_worker(_env(kafka, topics, logs, server.url), monkeypatch):
        records = await read_all(kafka, topics.verdicts, at_least=len(chats), timeout_s=60,
                                 settle_s=2.0)
        spans_done = await wait_committed(kafka, topics.group, topics.traces, 30)
        logs_done = await wait_committed(kafka, topics.group, logs, 30)

    verdicts = [json.loads(r.value) for r in records if r.value is not None]
    assert Counter(v["trace_id"] for v in verdicts) == {c.trace_id: 1 for c in chats}
    by_trace = {v["trace_id"]: v for v in verdicts}
    for chat in chats:
        verdict = by_trace[chat.trace_id]
        assert verdict["verdict"] == "pass", verdict
        assert verdict["span_id"] == chat.chat_span_id
        assert verdict["context_source"] == "llm_input"
        assert verdict["source"]["topic"] == topics.traces, "the spans' record is the source"
    assert spans_done[0] == spans_done[1], "every spans record committed"
    assert logs_done[0] == logs_done[1], "every logs record committed"


async def test_a_restart_mid_assembly_reassembles_each_trace_from_both_topics(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, server = fake_judge
    topics, logs = await _topics(kafka, "logs-restart", partitions=2)
    chats = _chats(6, "restart")
    # The spans and the first two log records of every trace, its roots held back: no trace
    # can close by quiet before the stop, so each is open across it.
    await produce(kafka, topics.traces, [_without_root(c) for c in chats],
                  keys=[c.key for c in chats])
    await produce(kafka, logs, [c.logs_value(c.logs[:2]) for c in chats],
                  keys=[c.key for c in chats])
    env = _env(kafka, topics, logs, server.url, TRACE_MAX_WAIT_SECONDS="300")
    stop = asyncio.Event()
    async with in_process_worker(env, monkeypatch, stop=stop) as task:
        await asyncio.sleep(4.0)  # everything read and assembled, nothing due
        stop.set()
        await task
    out = await read_all(kafka, topics.verdicts, timeout_s=2)
    assert out == [], "no trace judged before its time"
    committed, _ = await group_offsets(kafka, topics.group, logs)
    assert all(offset == 0 for offset in committed.values()), "the open traces hold the logs"

    # The choices and the roots come while no worker runs; the next one reads both topics
    # from their committed offsets and judges every trace whole, once.
    await produce(kafka, logs, [c.logs_value(c.logs[2:]) for c in chats],
                  keys=[c.key for c in chats])
    await produce(kafka, topics.traces, [otlp_proto([c.spans[-1]]) for c in chats],
                  keys=[c.key for c in chats])
    async with in_process_worker(env, monkeypatch):
        records = await read_all(kafka, topics.verdicts, at_least=len(chats), timeout_s=60,
                                 settle_s=2.0)
    verdicts = [json.loads(r.value) for r in records if r.value is not None]
    assert Counter(v["trace_id"] for v in verdicts) == {c.trace_id: 1 for c in chats}
    assert {v["verdict"] for v in verdicts} == {"pass"}, "the answer came from the logs"


def _without_root(chat: LoggedChat) -> bytes:
    root = chat.spans[-1]
    assert root.parent is None
    return otlp_proto(chat.spans[:-1])


_ASSIGNED = re.compile(r"TopicPartition\(topic='([^']+)', partition=(\d+)\)")


def _latest_assignment(log: str, topics: tuple[str, str]) -> dict[str, set[int]] | None:
    """The partitions the worker's last ``partitions_assigned`` line names, per topic."""
    lines = [line for line in log.splitlines() if "partitions_assigned" in line]
    if not lines:
        return None
    found: dict[str, set[int]] = {topic: set() for topic in topics}
    for topic, number in _ASSIGNED.findall(lines[-1].replace('\\"', '"')):
        found.setdefault(topic, set()).add(int(number))
    return found


async def test_three_workers_own_the_same_partition_numbers_of_both_topics_through_a_rebalance(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
) -> None:
    _, server = fake_judge
    topics, logs = await _topics(kafka, "logs-copart", partitions=PARTITIONS)
    env = _env(kafka, topics, logs, server.url, LOG_LEVEL="info", LOG_FORMAT="console")
    chats = _chats(24, "copart")
    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        workers = [await pool.start(env, name=f"w{n}") for n in range(3)]

        async def settled(running: list[Worker]) -> dict[str, dict[str, set[int]]]:
            for _ in range(120):
                seen = {w.name: _latest_assignment(w.log(), (topics.traces, logs))
                        for w in running}
                if all(seen.values()):
                    numbers = [a[topics.traces] for a in seen.values() if a]
                    if sorted(n for s in numbers for n in s) == list(range(PARTITIONS)):
                        return {name: a for name, a in seen.items() if a}
                await asyncio.sleep(0.5)
            raise AssertionError({w.name: w.log()[-2000:] for w in running})

        first = await settled(workers)
        for name, owned in first.items():
            assert owned[topics.traces] == owned[logs], (name, owned)
        half = len(chats) // 2
        await _send(kafka, topics.traces, logs, chats[:half])
        assert await out.wait_for({c.trace_id for c in chats[:half]}, timeout_s=60)

        assert await workers[0].terminate() == 0  # a rolling deploy's first step
        second = await settled(workers[1:])
        for name, owned in second.items():
            assert owned[topics.traces] == owned[logs], (name, owned)
        await _send(kafka, topics.traces, logs, chats[half:])
        assert await out.wait_for({c.trace_id for c in chats}, timeout_s=60), [
            w.log()[-3000:] for w in workers[1:]]
        await asyncio.sleep(1.0)
    counts = Counter(v["trace_id"] for v in out.verdicts)
    assert counts == {c.trace_id: 1 for c in chats}, "each trace once, across the rebalance"
    assert {v["verdict"] for v in out.verdicts} == {"pass"}


async def _send(kafka: str, spans_topic: str, logs_topic: str, chats: list[LoggedChat]) -> None:
    await produce(kafka, logs_topic, [c.logs_value() for c in chats], keys=[c.key for c in chats])
    await produce(kafka, spans_topic, [c.spans_value() for c in chats],
                  keys=[c.key for c in chats])


async def test_topics_with_different_partition_counts_are_refused_at_start_in_one_line(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
) -> None:
    _, server = fake_judge
    topics, logs = await _topics(kafka, "logs-counts", partitions=3, logs_partitions=2)
    async with WorkerPool(tmp_path) as pool:
        worker = await pool.start(_env(kafka, topics, logs, server.url))
        code = await asyncio.wait_for(worker.process.wait(), 60)
    lines = [line for line in worker.log().splitlines() if line.strip()]
    assert code == 2, worker.log()
    assert len(lines) == 1, lines
    assert "same number of partitions" in lines[0]
    assert f"{topics.traces} has 3" in lines[0]
    assert f"{logs} has 2" in lines[0]
    assert "Traceback" not in worker.log()


async def test_a_replay_reads_the_logs_topics_window_too_and_judges_each_trace_whole_once(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    _, server = fake_judge
    topics, logs = await _topics(kafka, "logs-replay", partitions=3)
    inside, after = _chats(4, "inside"), _chats(2, "after")
    now_ms = int(time.time() * 1000)
    from_ms, to_ms = now_ms - 60_000, now_ms - 30_000
    # The window's traces, their log records stamped a little after their spans (each topic
    # has its own offsets for the window's times), and two traces after --to.
    await _produce_at(kafka, topics.traces, [(c.key, c.spans_value(), from_ms + 1_000 * n)
                                             for n, c in enumerate(inside)])
    await _produce_at(kafka, logs, [(c.key, c.logs_value(), from_ms + 1_000 * n + 200)
                                    for n, c in enumerate(inside)])
    await _produce_at(kafka, topics.traces, [(c.key, c.spans_value(), to_ms + 1_000)
                                             for c in after])
    await _produce_at(kafka, logs, [(c.key, c.logs_value(), to_ms + 1_200) for c in after])

    summary = tmp_path / "summary.json"
    for name, value in _env(kafka, topics, logs, server.url).items():
        monkeypatch.setenv(name, value)
    code = await asyncio.wait_for(asyncio.to_thread(main, [
        "replay", "--from", _iso(from_ms), "--to", _iso(to_ms),
        "--summary-json", str(summary)]), timeout=120)

    assert code == 0
    records = await read_all(kafka, topics.verdicts, at_least=len(inside), settle_s=1.0)
    verdicts = [json.loads(r.value) for r in records if r.value is not None]
    assert Counter(v["trace_id"] for v in verdicts) == {c.trace_id: 1 for c in inside}
    assert {v["verdict"] for v in verdicts} == {"pass"}, "their answers were in the logs"
    written = json.loads(summary.read_text())
    assert written["complete"] is True
    assert written["records"] == 2 * len(inside), "the window of both topics"


async def _produce_at(kafka: str, topic: str, records: list[tuple[bytes, bytes, int]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka, enable_idempotence=True)
    await producer.start()
    try:
        for key, value, timestamp_ms in records:
            await producer.send(topic, value, key=key, timestamp_ms=timestamp_ms)
        await producer.flush()
    finally:
        await producer.stop()


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()



async def test_a_logs_topic_not_created_yet_is_waited_for_never_auto_created(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
) -> None:
    _, server = fake_judge
    topics = Topics.fresh("logs-later")
    logs = f"logs-{topics.traces}"
    await broker.create_topics(kafka, {topics.traces: 3, topics.verdicts: 1, topics.dlq: 1})
    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        worker = await pool.start(_env(kafka, topics, logs, server.url))
        assert await worker.wait_for_log('"topics_missing"', timeout_s=60), worker.log()
        await asyncio.sleep(2.0)
        assert logs not in await _topic_names(kafka), "subscribing would have created it"
        await broker.create_topics(kafka, {logs: 3})  # as the docs say: the same count
        chats = _chats(6, "later")
        await _send(kafka, topics.traces, logs, chats)
        assert await out.wait_for({c.trace_id for c in chats}, timeout_s=60), worker.log()
        assert worker.running
        assert await worker.terminate() == 0
    assert {v["verdict"] for v in out.verdicts} == {"pass"}
    assert worker.log().count('"topics_missing"') == 1, "said once, not per look"


async def _topic_names(kafka: str) -> set[str]:
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka)
    await consumer.start()
    try:
        return set(await consumer.topics())
    finally:
        await consumer.stop()
