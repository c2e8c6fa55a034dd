"""Delivery under SIGKILL: a worker killed at random moments loses nothing.

A killed worker commits nothing more and never leaves its group, so its successor re-reads
everything after the last commit: the records that were between fetch and commit, at most
``max_uncommitted`` of them. At least once, those come out as duplicate verdicts (same verdict
id, so a compacted topic keeps one); exactly once, the victim's open transaction is aborted
when the successor takes its partitions, so a ``read_committed`` reader sees none. Nothing
may come out missing or wrong in either mode.
"""

from __future__ import annotations

import asyncio
import random
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

pytestmark = [pytest.mark.integration, pytest.mark.soak]

TRACES = 3000
PARTITIONS = 6
KILLS = 5
JUDGE_LATENCY_S = 0.03


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
async def test_sigkill_at_random_moments_loses_nothing(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path, delivery: str
) -> None:
    judge, server = fake_judge
    judge.latency_s = JUDGE_LATENCY_S
    topics = Topics.fresh("kill")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    values, scores, empty = scored_stream(TRACES)
    env = worker_env(topics.env(kafka), server.url, DELIVERY=delivery)
    bound = max_uncommitted(Settings(judge_max_concurrency=int(env["JUDGE_MAX_CONCURRENCY"])))
    rng = random.Random(3)  # kill moments, reproducible
    await produce(kafka, topics.traces, values)

    started = time.monotonic()
    recoveries_s: list[float] = []  # from a kill to the successor's first verdict
    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        worker = await pool.start(env)
        mark, killed_at = 0, 0.0
        for kill in range(KILLS):
            # Kill only once this worker is really working: some fresh verdicts, then a
            # random moment (mid-batch, mid-commit, mid-publish: wherever it falls).
            assert await out.wait_for_count(mark + 40, timeout_s=60), (
                "the worker made no progress\n" + worker.log()
            )
            if kill:
                recoveries_s.append(out.arrived_at[mark] - killed_at)
            await asyncio.sleep(rng.uniform(0.0, 1.5))
            assert len(out.trace_ids()) < len(scores), "killed too late: no work was left"
            assert await worker.kill() == -9
            killed_at = time.monotonic()
            worker = await pool.start(env)
            # Verdicts the victim published just before dying may still be on their way
            # to the collector; the successor needs longer than this to import, let alone
            # to publish.
            await asyncio.sleep(0.3)
            mark = len(out.verdicts)
        assert await out.wait_for(set(scores), timeout_s=120), "verdicts are missing"
        finished_s = time.monotonic() - started
        recoveries_s.append(out.arrived_at[mark] - killed_at)
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 30)
        await asyncio.sleep(1.0)  # any stray verdict (there must be none) has time to arrive
        assert await worker.terminate() == 0

    result = tally(out.verdicts, scores)
    print(
        f"\nSIGKILL ({delivery}): {TRACES} traces ({len(empty)} empty) over "
        f"{PARTITIONS} partitions, "
        f"{KILLS} kills, judge latency {JUDGE_LATENCY_S * 1000:.0f} ms: "
        f"{len(result.missing)} missing, {len(result.wrong)} wrong, "
        f"{result.duplicates} duplicates (bound {KILLS} x {bound} = {KILLS * bound}), "
        f"finished in {finished_s:.1f} s; from a kill to the successor's first verdict "
        f"{min(recoveries_s):.1f}-{max(recoveries_s):.1f} s"
    )
    assert not result.missing
    assert not result.unexpected, "empty outputs must get no verdict"
    assert not result.wrong
    assert not result.unstable_ids, "a redelivered trace must keep its verdict id"
    assert result.duplicates <= KILLS * bound
    if delivery == "exactly_once":
        assert result.duplicates == 0, "read_committed must see each verdict once"
    assert committed == ends
    assert sum(ends.values()) == TRACES
    for worker in pool.workers:
        assert not tracebacks(worker.log()), worker.name

