"""Everything at once: two workers, repeated SIGKILLs, a judge outage, a 429 every 7th call.

The faults combine in ways the single-fault tests do not reach: a kill while the circuit is
open, a rebalance while calls wait on Retry-After. The outcome must still be every non-empty
trace judged correctly, none of the empty ones, and (exactly once) no duplicate to a
``read_committed`` reader.
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

pytestmark = [pytest.mark.integration, pytest.mark.soak]

TRACES = 1500
PARTITIONS = 6
KILLS = 3
OUTAGE_S = 6.0


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
async def test_two_workers_kills_outage_and_429s(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path, delivery: str
) -> None:
    judge, server = fake_judge
    judge.latency_s = 0.02
    judge.fail_every_nth = (7, 429)
    judge.retry_after_s = 0.3
    topics = Topics.fresh("chaos")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    values, scores, _ = scored_stream(TRACES, prefix="c")
    env = worker_env(topics.env(kafka), server.url, DELIVERY=delivery)
    bound = max_uncommitted(Settings(judge_max_concurrency=int(env["JUDGE_MAX_CONCURRENCY"])))
    await produce(kafka, topics.traces, values)

    started = time.monotonic()
    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        workers = [await pool.start(env), await pool.start(env)]
        for kill in range(KILLS):
            assert await out.wait_for_count(150 * (kill + 1), timeout_s=90), "no progress"
            if kill == 1:  # the judge goes down for everyone, with work in flight
                judge.outage = 503
                await asyncio.sleep(OUTAGE_S / 2)
            victim = workers[kill % 2]
            assert await victim.kill() == -9
            workers[kill % 2] = await pool.start(env)
            if kill == 1:
                await asyncio.sleep(OUTAGE_S / 2)
                judge.outage = None
        assert await out.wait_for(set(scores), timeout_s=180), "verdicts are missing"
        finished_s = time.monotonic() - started
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 60)
        await asyncio.sleep(1.0)
        for worker in workers:
            assert await worker.terminate() == 0

    result = tally(out.verdicts, scores)
    errors = [f'{v["trace_id"]}: {v["error"]}' for v in out.verdicts if v["verdict"] == "error"]
    print(
        f"\nchaos ({delivery}): {TRACES} traces, 2 workers, {KILLS} kills, {OUTAGE_S:.0f} s "
        f"outage, 429 on every 7th call: {len(result.missing)} missing, {len(result.wrong)} "
        f"wrong, {len(errors)} errors, {result.duplicates} duplicates, {finished_s:.1f} s"
    )
    assert not result.missing
    assert not result.unexpected
    assert not errors, "neither the outage nor the 429s may turn a trace into an error"
    assert not result.wrong
    assert result.duplicates <= KILLS * bound
    if delivery == "exactly_once":
        assert result.duplicates == 0
    assert committed == ends
    for worker in pool.workers:
        assert not tracebacks(worker.log()), worker.name
