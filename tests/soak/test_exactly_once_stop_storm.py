"""Exactly once through a rolling deploy's worth of stops: twelve SIGTERMs at random moments
under load, each followed by a restart; a ``read_committed`` reader sees every verdict once.
The one stop aimed inside a commit: tests/integration/test_exactly_once_stops.py.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from consumer.localjudge.server import JudgeServer
from tests.support.fake_judge import ScriptedJudge
from tests.support.streams import (
    Topics,
    create_topics,
    produce,
)
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

TRACES = 2400
PARTITIONS = 6
STOPS = 12
JUDGE_LATENCY_S = 0.04  # paces the workers so that work is left at every stop


async def test_sigterm_at_random_moments_publishes_each_verdict_once(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path
) -> None:
    judge, server = fake_judge
    judge.latency_s = JUDGE_LATENCY_S
    topics = Topics.fresh("eos-stops")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    values, scores, _ = scored_stream(TRACES)
    await produce(kafka, topics.traces, values)
    env = worker_env(topics.env(kafka), server.url, DELIVERY="exactly_once",
                     DRAIN_TIMEOUT_SECONDS="20")
    rng = random.Random(11)  # stop moments, reproducible

    codes: list[int] = []
    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        for stop in range(STOPS):
            worker = await pool.start(env, name=f"worker-{stop + 1}")
            mark = len(out.verdicts)
            assert await out.wait_for_count(mark + 20, timeout_s=60), worker.log()
            # Stop only a worker that is publishing: a random moment in its stream of
            # 0.2 s commit cycles (mid-fetch, mid-judge, mid-transaction).
            await asyncio.sleep(rng.uniform(0.0, 1.0))
            assert len(out.trace_ids()) < len(scores), "stopped too late: no work was left"
            codes.append(await worker.terminate(timeout_s=40))
        last = await pool.start(env, name="last")
        assert await out.wait_for(set(scores), timeout_s=120), "verdicts are missing"
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 30)
        await asyncio.sleep(1.0)  # any stray verdict (there must be none) has time to arrive
        codes.append(await last.terminate())

    result = tally(out.verdicts, scores)
    print(
        f"\nSIGTERM (exactly_once): {TRACES} traces over {PARTITIONS} partitions, {STOPS} "
        f"stops: {len(result.missing)} missing, {len(result.wrong)} wrong, "
        f"{result.duplicates} duplicates to a read_committed reader"
    )
    assert codes == [0] * (STOPS + 1)
    assert not result.missing
    assert not result.wrong
    assert result.duplicates == 0, "a stop mid-commit published its outcomes twice"
    assert committed == ends
    for worker in pool.workers:
        assert not tracebacks(worker.log()), worker.name
