"""OAUTHBEARER under load: three minutes of a steady stream while every token lives 20 s.

On the session's TLS broker (``tls_broker``), with the worker set up as
``tests/integration/test_kafka_tls.py`` sets it up for its oauth listener.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from pathlib import Path

import pytest

from consumer.localjudge.server import JudgeServer
from tests.integration.test_kafka_tls import env_for, secrets
from tests.support.fake_judge import ScriptedJudge
from tests.support.streams import Topics, create_topics, produce
from tests.support.tls_material import TlsBroker
from tests.support.workers import (
    VerdictCollector,
    WorkerPool,
    scored_stream,
    tally,
    tracebacks,
    wait_committed,
)

pytestmark = [pytest.mark.integration, pytest.mark.soak]

REFRESH_LIFETIME_S = 20
REFRESH_RUN_S = 180
TRACES_PER_S = 10


async def test_tokens_expiring_every_20_s_lose_and_duplicate_no_verdict_under_load(
    tls_broker: TlsBroker, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
) -> None:
    """Three minutes of a steady stream while every token lives 20 s. The broker drops each
    connection whose token expired; the worker fetches a new token and reconnects. Prints how
    long the worker took to fetch a token, and the longest pause in the verdicts."""
    _, server = fake_judge
    oauth = tls_broker.oauth
    topics = Topics.fresh("tls-refresh")
    plaintext = tls_broker.addresses["plaintext"]
    await create_topics(plaintext, topics, partitions=2)
    total = REFRESH_RUN_S * TRACES_PER_S
    values, scores, _ = scored_stream(total, empty_every=total + 1, prefix="refresh")
    env = env_for(tls_broker, "oauth", topics, server.url, DELIVERY="exactly_once",
                  LOG_LEVEL="info")
    oauth.lifetime_s = REFRESH_LIFETIME_S
    issued_before = oauth.tokens_issued
    try:
        async with (WorkerPool(tmp_path) as pool,
                    VerdictCollector(plaintext, topics.verdicts) as got):
            worker = await pool.start(env)
            began = time.monotonic()
            for second in range(REFRESH_RUN_S):
                chunk = values[second * TRACES_PER_S:(second + 1) * TRACES_PER_S]
                await produce(plaintext, topics.traces, chunk)
                await asyncio.sleep(max(0.0, began + second + 1 - time.monotonic()))
            assert await got.wait_for(set(scores), timeout_s=120), worker.log()[-3000:]
            committed, ends = await wait_committed(plaintext, topics.group, topics.traces, 60)
            assert worker.running, worker.log()[-3000:]
            assert await worker.terminate() == 0, worker.log()[-3000:]
    finally:
        oauth.lifetime_s = 3600

    counted = tally(got.verdicts, scores)
    assert (len(counted.missing), counted.unexpected, counted.wrong, counted.duplicates) == (
        0, set(), [], 0)
    assert committed == ends
    refreshes = oauth.tokens_issued - issued_before
    assert refreshes >= REFRESH_RUN_S // REFRESH_LIFETIME_S - 1, refreshes
    log = worker.log()
    assert not tracebacks(log)
    for marker in ("kafka_oauth_failed", "kafka_oauth_refresh_failed"):
        assert marker not in log
    for secret in secrets(tls_broker):
        assert secret not in log

    fetched = [event for event in worker.events() if event.get("event") == "kafka_oauth_token"]
    assert len(fetched) == refreshes  # the worker's count agrees with the endpoint's
    took = [float(event["took_ms"]) for event in fetched]
    issued_at = [token.issued_at for token in oauth.issued[issued_before:]]
    every = [b - a for a, b in itertools.pairwise(issued_at)]
    gaps = [b - a for a, b in itertools.pairwise(got.arrived_at)]
    errors = [event["event"][:80] for event in worker.events() if event.get("level") == "error"]
    print(f"refresh: {refreshes} tokens in {REFRESH_RUN_S} s, one every "
          f"{statistics.median(every):.1f} s (median); the worker's fetch took median "
          f"{statistics.median(took):.1f} ms, max {max(took):.1f} ms; longest pause between "
          f"verdicts {max(gaps) * 1000:.0f} ms; {len(errors)} error lines: "
          f"{sorted(set(errors))[:5]}")
