"""Exactly once through rolling deploys: a SIGTERM inside a commit (twelve at random moments
under load: tests/soak/test_exactly_once_stop_storm.py).

A SIGTERM may land while a commit's transaction is in flight. aiokafka finishes ``EndTxn``
on the broker even when the awaiting task is cancelled, so a worker that abandoned the commit
would not know its outcomes were published, and would publish them again in the drain's
transaction. A ``read_committed`` reader must see every verdict once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from consumer.localjudge.server import JudgeServer
from tests.support.fake_judge import ScriptedJudge
from tests.support.streams import (
    Topics,
    create_topics,
    in_process_worker,
    produce,
    read_all,
    verdicts_by_trace,
)
from tests.support.workers import (
    scored_stream,
    wait_committed,
    worker_env,
)

pytestmark = pytest.mark.integration

async def test_a_stop_inside_a_commit_waits_for_its_transaction(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stop lands exactly while a transaction's EndTxn is on its way to the broker."""
    judge, server = fake_judge
    judge.latency_s = 0.05
    topics = Topics.fresh("eos-stop-in-commit")
    await create_topics(kafka, topics, partitions=3)
    values, scores, _ = scored_stream(300)
    await produce(kafka, topics.traces, values)
    env = worker_env(topics.env(kafka), server.url, DELIVERY="exactly_once")

    stop = asyncio.Event()
    commit_transaction = AIOKafkaProducer.commit_transaction
    commits = 0

    async def commit_and_stop(producer: AIOKafkaProducer) -> None:
        nonlocal commits
        commits += 1
        if commits == 6:  # by now every transaction carries verdicts
            stop.set()
        await commit_transaction(producer)

    with monkeypatch.context() as patched:
        patched.setattr(AIOKafkaProducer, "commit_transaction", commit_and_stop)
        async with in_process_worker(env, monkeypatch, stop) as task:
            await asyncio.wait_for(task, timeout=60)
    assert commits >= 6
    async with in_process_worker(env, monkeypatch):
        await wait_committed(kafka, topics.group, topics.traces, 60)
    records = await read_all(kafka, topics.verdicts, at_least=len(scores), settle_s=1.0)
    published = verdicts_by_trace(records)
    twice = sorted(t for t, found in published.items() if len(found) > 1)
    assert set(published) == set(scores)
    assert not twice, f"{len(twice)} verdicts published twice, e.g. {twice[:3]}"
