"""Exactly once when a partition's transactional producer cannot start, is fenced, or meets a
zombie: the partition waits (unready, one warning) or starts over from its committed
offset, the other partitions go on, and a ``read_committed`` reader sees each verdict once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Collection
from typing import Any

import httpx2
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError

from consumer.localjudge.server import JudgeServer
from consumer.pipeline.pipeline import Pipeline
from tests.support.fake_judge import ScriptedJudge
from tests.support.http import wait_status
from tests.support.ports import free_port
from tests.support.streams import (
    Topics,
    create_topics,
    group_offsets,
    in_process_worker,
    produce,
    read_all,
    verdicts_by_trace,
)
from tests.support.workers import scored_stream, wait_committed, worker_env

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


async def _stream(kafka: str, judge_url: str, name: str, count: int, empty_every: int = 10
                  ) -> tuple[Topics, dict[str, int], dict[str, str], int]:
    """Fresh topics with ``count`` scored traces on them: (topics, scores by trace id, the
    worker's exactly-once environment, its health port)."""
    topics = Topics.fresh(name)
    await create_topics(kafka, topics, partitions=PARTITIONS)
    values, scores, _ = scored_stream(count, empty_every=empty_every)
    await produce(kafka, topics.traces, values)
    port = free_port()
    env = worker_env(topics.env(kafka), judge_url, DELIVERY="exactly_once",
                     HEALTH_PORT=str(port))
    return topics, scores, env, port


async def _until_committed(kafka: str, topics: Topics, done: Callable[[dict[int, int]], bool],
                           timeout_s: float = 60) -> dict[int, int]:
    """Poll the group's committed offsets until ``done`` holds for them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        committed, _ = await group_offsets(kafka, topics.group, topics.traces)
        if done(committed):
            return committed
        await asyncio.sleep(0.2)
    raise AssertionError(f"committed offsets never got there: {committed}")


async def test_a_producer_that_cannot_start_holds_its_partition_unready_then_recovers(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], http: httpx2.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, server = fake_judge
    topics, scores, env, port = await _stream(kafka, server.url, "eos-start-fails", 60)

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
                                    containing="cannot start")
        assert "1 partition(s) not started" in unready.text
        assert "partition=1): cannot start its transactional producer: KafkaConnectionError" \
            in unready.text
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
    topics, scores, env, _ = await _stream(kafka, server.url, "eos-fenced", 900)

    async with in_process_worker(env, monkeypatch):
        await _until_committed(kafka, topics, lambda c: all(n > 20 for n in c.values()))
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
    topics, scores, env, _ = await _stream(kafka, server.url, "eos-zombie", 60,
                                           empty_every=10**6)
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


async def test_a_producer_lost_before_the_first_commit_loses_no_record(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No committed offset yet: starting over means from the beginning, not from wherever
    the consumer had fetched to."""
    judge, server = fake_judge
    judge.latency_s = 0.3
    topics, scores, env, _ = await _stream(kafka, server.url, "eos-lost-first", 90,
                                           empty_every=10**6)
    target = f"{topics.group}.{topics.traces}.0"
    start = AIOKafkaProducer.start
    fences: list[asyncio.Task[None]] = []

    async def fence_soon() -> None:
        await asyncio.sleep(0.1)  # handed over and fetched, nothing committed yet
        usurper = AIOKafkaProducer(bootstrap_servers=kafka, transactional_id=target)
        await start(usurper)
        await usurper.stop()

    async def start_then_fenced(producer: AIOKafkaProducer) -> None:
        await start(producer)
        if _transactional_id(producer) == target and not fences:
            fences.append(asyncio.create_task(fence_soon()))

    monkeypatch.setattr(AIOKafkaProducer, "start", start_then_fenced)
    async with in_process_worker(env, monkeypatch):
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 60)
    await asyncio.gather(*fences)
    assert committed == ends
    await _once_each(kafka, topics, set(scores))


async def test_producers_lost_inside_a_revoke_are_not_taken_back(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], http: httpx2.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every producer is fenced just before a rebalance's revoke commits: the revoked
    partitions must stay with their new owner (no restart, no stale state, still ready)."""
    judge, server = fake_judge
    judge.latency_s = 0.05
    topics, scores, env, port = await _stream(kafka, server.url, "eos-lost-revoke", 600)
    armed = asyncio.Event()
    revoke = Pipeline.on_partitions_revoked

    async def fenced_then_revoke(pipeline: Pipeline, revoked: Collection[Any]) -> None:
        if armed.is_set() and revoked:
            armed.clear()
            for p in range(PARTITIONS):
                usurper = AIOKafkaProducer(bootstrap_servers=kafka,
                                           transactional_id=f"{topics.group}.{topics.traces}.{p}")
                await usurper.start()
                await usurper.stop()
        await revoke(pipeline, revoked)

    monkeypatch.setattr(Pipeline, "on_partitions_revoked", fenced_then_revoke)
    async with in_process_worker(env, monkeypatch) as worker:
        await _until_committed(kafka, topics, lambda c: all(n > 10 for n in c.values()))
        armed.set()
        other = AIOKafkaConsumer(topics.traces, bootstrap_servers=kafka, group_id=topics.group,
                                 enable_auto_commit=False, isolation_level="read_committed")
        await other.start()
        try:
            while not other.assignment():
                await other.getmany(timeout_ms=200)
            other.pause(*other.assignment())  # it holds its partitions and reads nothing
            await wait_status(http, f"http://127.0.0.1:{port}/readyz", 200, timeout_s=30)
            for _ in range(15):  # 3 s with the partitions held elsewhere
                await other.getmany(timeout_ms=200)
            ready = await http.get(f"http://127.0.0.1:{port}/readyz")
            assert ready.status_code == 200, ready.text
            assert not worker.done()
        finally:
            await other.stop()
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 90)
    assert committed == ends
    await _once_each(kafka, topics, set(scores))


async def test_a_producer_start_that_hangs_holds_only_its_partition(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], http: httpx2.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiokafka's start waits for a transaction coordinator that cannot be found: the other
    partitions go on, the worker says why it is unready, and a stop is not held up."""
    _, server = fake_judge
    topics, _, env, port = await _stream(kafka, server.url, "eos-start-hangs", 60)
    start = AIOKafkaProducer.start
    hung = f"{topics.group}.{topics.traces}.0"

    async def hanging_start(producer: AIOKafkaProducer) -> None:
        if _transactional_id(producer) == hung:
            await asyncio.Event().wait()
        await start(producer)

    monkeypatch.setattr(AIOKafkaProducer, "start", hanging_start)
    async with in_process_worker(env, monkeypatch) as worker:
        unready = await wait_status(http, f"http://127.0.0.1:{port}/readyz", 503,
                                    timeout_s=30, containing="partition=0)")
        assert "1 partition(s) not started" in unready.text
        committed = await _until_committed(kafka, topics, lambda c: c[1] == c[2] == 20)
        assert committed[0] == 0
        stopping = time.monotonic()
    assert worker.done()
    assert time.monotonic() - stopping < 10, "the hung start held the stop up"
