"""Rebalances: workers joining and leaving one group mid-stream lose nothing.

Real worker processes (2, then 3, then 2, then 3 in the group) over a real broker. What each
step of the rebalance path does is pinned down without a broker in
``tests/unit/pipeline/test_pipeline_rebalance.py``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from consumer.localjudge.server import JudgeServer
from consumer.settings import Settings
from consumer.wiring import max_uncommitted
from tests.support.fake_judge import ScriptedJudge
from tests.support.streams import Topics, create_topics, produce
from tests.support.workers import (
    VerdictCollector,
    WorkerPool,
    scored_stream,
    tally,
    tracebacks,
    wait_committed,
    worker_env,
)

pytestmark = pytest.mark.integration

TRACES = 2400
PARTITIONS = 6


async def test_workers_joining_and_leaving_lose_nothing(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path
) -> None:
    judge, server = fake_judge
    judge.latency_s = 0.03
    topics = Topics.fresh("rebalance")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    values, scores, _ = scored_stream(TRACES)
    env = worker_env(topics.env(kafka), server.url)
    bound = max_uncommitted(Settings(judge_max_concurrency=int(env["JUDGE_MAX_CONCURRENCY"])))
    await produce(kafka, topics.traces, values)

    started = time.monotonic()
    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        first = await pool.start(env)
        await pool.start(env)
        step = len(scores) // 5
        changes = []  # group membership changes, each one a rebalance
        assert await out.wait_for_count(step, timeout_s=90), first.log()
        await pool.start(env)  # 2 -> 3
        changes.append("join")
        assert await out.wait_for_count(2 * step, timeout_s=90)
        assert len(out.trace_ids()) < len(scores), "the stream ended before the leave"
        assert await first.terminate() == 0  # 3 -> 2, mid-stream
        changes.append("leave")
        assert await out.wait_for_count(3 * step, timeout_s=90)
        assert len(out.trace_ids()) < len(scores), "the stream ended before the last join"
        await pool.start(env)  # 2 -> 3
        changes.append("join")
        assert await out.wait_for(set(scores), timeout_s=120), "verdicts are missing"
        finished_s = time.monotonic() - started
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 30)
        await asyncio.sleep(1.0)
        codes = [await worker.terminate() for worker in pool.running()]

    result = tally(out.verdicts, scores)
    print(
        f"\nrebalance: {TRACES} traces over {PARTITIONS} partitions, 2 -> 3 -> 2 -> 3 workers "
        f"({len(changes)} membership changes, SIGTERM for the leave): "
        f"{len(result.missing)} missing, {len(result.wrong)} wrong, "
        f"{result.duplicates} duplicates, finished in {finished_s:.1f} s"
    )
    assert not result.missing
    assert not result.unexpected
    assert not result.wrong
    # A graceful rebalance drains before it commits, so it should re-deliver nothing; the
    # bound is what a revoke timing out on every change could cost.
    assert result.duplicates <= len(changes) * bound
    assert committed == ends
    assert codes == [0] * len(codes)
    for worker in pool.workers:
        assert not tracebacks(worker.log()), worker.name
