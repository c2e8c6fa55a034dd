"""Three real workers share one judge account on the real broker: they pace themselves from
the account's rate-limit headers, a 429 never opens a circuit, and the account is used."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from consumer.localjudge.account import AccountLimits
from consumer.localjudge.server import JudgeServer
from tests.support.fake_judge import ScriptedJudge
from tests.support.streams import Topics, create_topics, produce
from tests.support.workers import (
    REPO_ROOT,
    VerdictCollector,
    WorkerPool,
    scored_stream,
    tally,
    tracebacks,
    worker_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.soak]

RPM = 600  # the account's: 10 requests a second
TRACES = 360  # about 36 s at the account's rate


async def test_three_replicas_at_the_accounts_limit_pace_themselves_without_429s(
    kafka: str, tmp_path: Path,
) -> None:
    topics = Topics.fresh("judge-account")
    await create_topics(kafka, topics, partitions=6)
    values, scores, _ = scored_stream(TRACES, empty_every=TRACES + 1, prefix="account")
    await produce(kafka, topics.traces, values)
    judge = ScriptedJudge()
    judge.latency_s = 0.3
    # Kept saturated by others until now: it starts empty, the hard case for a fleet starting.
    account = AccountLimits(judge, RPM, full=False)
    with JudgeServer(account, models=("scripted-judge",)) as server:
        # Each replica told the account's limit, as a user who read only the old docs would.
        env = worker_env(topics.env(kafka), server.url, JUDGE_REQUESTS_PER_MINUTE=str(RPM),
                         JUDGE_MAX_CONCURRENCY="16", LOG_LEVEL="info",
                         PYTHONPATH=str(REPO_ROOT))
        async with (VerdictCollector(kafka, topics.verdicts) as got,
                    WorkerPool(tmp_path) as pool):
            started = time.monotonic()
            workers = [await pool.start(env) for _ in range(3)]
            assert await got.wait_for(set(scores), timeout_s=120), workers[0].log()[-2000:]
            took_s = time.monotonic() - started
            assert [await worker.terminate() for worker in workers] == [0, 0, 0]
    stats = account.stats()
    counted = tally(got.verdicts, scores)
    assert (len(counted.missing), counted.wrong) == (0, [])
    assert not [v for v in got.verdicts if v["verdict"] == "error"]
    limited = stats.statuses.get(429, 0)
    print(f"\n3 replicas, one account of {RPM}/min: {stats.arrived} calls, {limited} answered "
          f"429, all judged in {took_s:.1f} s")
    assert limited <= 0.02 * stats.arrived, (limited, stats.arrived)
    logs = "".join(worker.log() for worker in workers)
    assert "judge_circuit_open" not in logs, "a rate limit is backpressure, not an outage"
    assert not tracebacks(logs)
    # Paced near the account's rate, not under it: the traces took about TRACES / 10 s.
    assert took_s < TRACES / (RPM / 60) * 1.6 + 15
