"""Exactly once when a partition's transactional producer cannot start, is fenced, or meets a
zombie: the partition waits (unready, one warning) or starts over from its committed
offset, the other partitions go on, and a ``read_committed`` reader sees each verdict once.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError

from consumer.judge_server import JudgeServer
from tests.fakes.judge import ScriptedJudge
from tests.integration.streams import (
    Topics,
    create_topics,
    in_process_worker,
    produce,
    read_all,
    verdicts_by_trace,
)
from tests.integration.workers import scored_stream, wait_committed, worker_env
from tests.support.http import wait_status
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

PARTITIONS = 3


def _transactional_id(producer: AIOKafkaProducer) -> str | None:
    manager = getattr(producer, "_txn_manager", None)
    return manager.transactional_id if manager is not None else None


async def _once_each(kafka: str, topics: Topics, expected: set[str]) -> dict[str, list[Any]]:
    """The verdicts topic read_committed, once every expected trace has a verdict."""
    records = await read_all(kafka, topics.verdicts, at_least=len(expected), settle_s=1.0)
    published = verdicts_by_trace(records)
    twice = sorted(t for t, found in published.items() if len(found) > 1)
    assert set(published) == expected
    assert not twice, f"{len(twice)} traces have two verdicts, e.g. {twice[:3]}"
    return published


async def test_a_producer_that_cannot_start_holds_its_partition_unready_then_recovers(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], http: httpx2.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, server = fake_judge
    topics = Topics.fresh("eos-start-fails")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    values, scores, _ = scored_stream(60)
    await produce(kafka, topics.traces, values)
    port = free_port()
    env = worker_env(topics.env(kafka), server.url, DELIVERY="exactly_once",
                     HEALTH_PORT=str(port))

    start = AIOKafkaProducer.start
    broken = f"{topics.group}.{topics.traces}.1"  # one partition's coordinator is away
    failures = 0

    async def flaky_start(producer: AIOKafkaProducer) -> None:
        nonlocal failures
        if _transactional_id(producer) == broken and failures < 3:
            failures += 1
            raise KafkaConnectionError("transaction coordinator unreachable (test)")
        await start(producer)

    monkeypatch.setattr(AIOKafkaProducer, "start", flaky_start)
    async with in_process_worker(env, monkeypatch):
        unready = await wait_status(http, f"http://127.0.0.1:{port}/readyz", 503, timeout_s=30,
                                    containing="1 partition(s) cannot start")
        assert "partition=1): KafkaConnectionError" in unready.text
        await wait_status(http, f"http://127.0.0.1:{port}/readyz", 200, timeout_s=60)
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 60)
    assert failures == 3
    assert committed == ends
    await _once_each(kafka, topics, set(scores))


async def test_a_fenced_producer_is_replaced_and_its_partition_starts_over(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    judge, server = fake_judge
    judge.latency_s = 0.02
    topics = Topics.fresh("eos-fenced")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    values, scores, _ = scored_stream(900)
    await produce(kafka, topics.traces, values)
    env = worker_env(topics.env(kafka), server.url, DELIVERY="exactly_once")

    async with in_process_worker(env, monkeypatch):
        committed: dict[int, int] = {}
        while not all(committed.get(p, 0) > 20 for p in range(PARTITIONS)):
            committed, _ = await wait_committed(kafka, topics.group, topics.traces, 0)
            await asyncio.sleep(0.1)
        # Another producer initialises partition 0's transactional id: the worker's is fenced.
        usurper = AIOKafkaProducer(bootstrap_servers=kafka,
                                   transactional_id=f"{topics.group}.{topics.traces}.0")
        await usurper.start()
        await usurper.stop()
        final, ends = await wait_committed(kafka, topics.group, topics.traces, 90)
    assert final == ends
    await _once_each(kafka, topics, set(scores))


async def test_a_zombie_commit_before_fencing_is_not_judged_again(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The previous owner (a zombie that still holds work) commits a transaction after this
    worker's consumer read the committed offsets and before this worker's producer fenced
    it. The worker must start from the offset that transaction committed."""
    _, server = fake_judge
    topics = Topics.fresh("eos-zombie")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    values, scores, _ = scored_stream(60, empty_every=10**6)
    await produce(kafka, topics.traces, values)
    env = worker_env(topics.env(kafka), server.url, DELIVERY="exactly_once")
    transactional_id = f"{topics.group}.{topics.traces}.0"
    zombie = AIOKafkaProducer(bootstrap_servers=kafka, transactional_id=transactional_id)
    await zombie.start()  # the previous owner of partition 0, with work in hand
    zombie_done = 5  # the records of partition 0 it judged: offsets 0-4, traces 0, 3, ...

    start = AIOKafkaProducer.start
    fired = False

    async def zombie_commits_first(producer: AIOKafkaProducer) -> None:
        nonlocal fired
        if _transactional_id(producer) == transactional_id and not fired:
            fired = True
            async with zombie.transaction():
                for offset in range(zombie_done):
                    trace_id = f"t-{PARTITIONS * offset:06d}"
                    await zombie.send(topics.verdicts, json.dumps(
                        {"trace_id": trace_id, "verdict_id": f"zombie-{trace_id}"}).encode())
                await zombie.send_offsets_to_transaction(
                    {TopicPartition(topics.traces, 0): zombie_done}, topics.group)
        await start(producer)

    monkeypatch.setattr(AIOKafkaProducer, "start", zombie_commits_first)
    try:
        async with in_process_worker(env, monkeypatch):
            committed, ends = await wait_committed(kafka, topics.group, topics.traces, 60)
    finally:
        await zombie.stop()
    assert fired
    assert committed == ends
    published = await _once_each(kafka, topics, set(scores))
    assert published["t-000000"][0]["verdict_id"] == "zombie-t-000000"
