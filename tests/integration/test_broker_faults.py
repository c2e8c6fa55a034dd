"""Broker faults: the broker going away and coming back, or never coming up at all.

These tests stop and start a broker, so they run their own ``scripts/kafka-local`` broker on
a free port (module-scoped, deleted at the end), never the shared one the other tests use.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from consumer.localjudge.server import JudgeServer
from tests.support.fake_judge import ScriptedJudge
from tests.support.kafka import free_port_pair, kafka_local_async, own_kafka_local
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

# One xdist process runs the module, so its broker (a JVM) starts once.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("broker_faults")]

TRACES = 1500
PARTITIONS = 6
OUTAGE_S = 5.0
DRAIN_TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def own_broker() -> Iterator[tuple[str, int]]:
    """A broker of this module's own, on a free port; stopped and deleted afterwards."""
    yield from own_kafka_local()


async def test_worker_rides_out_a_broker_restart(
    own_broker: tuple[str, int], fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path
) -> None:
    bootstrap, port = own_broker
    await kafka_local_async("start", port)  # already running, unless a test before left it down
    judge, server = fake_judge
    judge.latency_s = 0.03
    topics = Topics.fresh("restart")
    await create_topics(bootstrap, topics, partitions=PARTITIONS)
    values, scores, _ = scored_stream(TRACES)
    await produce(bootstrap, topics.traces, values)
    env = worker_env(topics.env(bootstrap), server.url)

    async with WorkerPool(tmp_path) as pool, VerdictCollector(bootstrap, topics.verdicts) as out:
        worker = await pool.start(env)
        assert await out.wait_for_count(300, timeout_s=90), worker.log()
        stopping = time.monotonic()
        await kafka_local_async("stop", port)  # graceful; the data dir stays
        await asyncio.sleep(OUTAGE_S)
        assert worker.running, "the worker exited while the broker was down\n" + worker.log()
        before = len(out.verdicts)
        starting = time.monotonic()
        await kafka_local_async("start", port)  # the same broker: same data, same port
        ready_s = time.monotonic() - starting
        assert await out.wait_for(set(scores), timeout_s=120), (
            "verdicts are missing after the broker came back\n" + worker.log()[-5000:]
        )
        # The first verdict after the restart began: the worker's reconnection time.
        resumed_s = out.arrived_at[before] - starting
        done_s = time.monotonic() - starting
        committed, ends = await wait_committed(bootstrap, topics.group, topics.traces, 30)
        await asyncio.sleep(1.0)
        assert worker.running, "the worker restarted or exited: it should have reconnected"
        assert await worker.terminate() == 0

    result = tally(out.verdicts, scores)
    lines = worker.log().count("\n")
    print(
        f"\nbroker restart: {TRACES} traces, broker stopped for {starting - stopping:.1f} s, "
        f"{ready_s:.1f} s to start again: {len(result.missing)} missing, {len(result.wrong)} "
        f"wrong, {result.duplicates} duplicates; first verdict {resumed_s:.1f} s after the "
        f"start began, all done after {done_s:.1f} s; {lines} log lines"
    )
    assert not result.missing
    assert not result.unexpected
    assert not result.wrong
    assert committed == ends
    assert not tracebacks(worker.log())
    # No busy loop while the broker is down (aiokafka's metadata retries used to spin: about
    # 2,000 ERROR lines a second; see consumer/kafka/compat.py).
    assert lines < 40 * (time.monotonic() - stopping), "log flood while the broker was down"


async def test_unreachable_broker_is_reported_and_sigterm_exits_cleanly(
    fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path
) -> None:
    _, server = fake_judge
    nobody = free_port_pair()  # nobody listens there
    topics = Topics.fresh("unreachable")
    env = worker_env(topics.env(f"127.0.0.1:{nobody}"), server.url)
    async with WorkerPool(tmp_path) as pool:
        worker = await pool.start(env)
        assert await worker.wait_for_log("kafka_unreachable", timeout_s=30), worker.log()
        await asyncio.sleep(4.0)  # a few retries (1 s, 2 s, ...): no crash loop
        assert worker.running, "the worker gave up instead of waiting for the broker"
        code = await worker.terminate(timeout_s=15)

    log = worker.log()
    print(f"\nunreachable broker: log lines {log.count(chr(10))}, exit code {code}")
    assert code == 0
    assert not tracebacks(log)
    unreachable = [e for e in worker.events() if e.get("event") == "kafka_unreachable"]
    assert len(unreachable) == 1, "retried, and said once a minute"
    assert all(e["level"] == "warning" for e in unreachable)
    assert all(str(nobody) in e["detail"] for e in unreachable)


async def test_sigterm_while_the_broker_is_down_exits_within_the_grace_period(
    own_broker: tuple[str, int], fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path
) -> None:
    # Before the fix the fetch loop sat in consumer.commit(), which looks for the group
    # coordinator until the broker is back, so SIGTERM was never acted on.
    bootstrap, port = own_broker
    await kafka_local_async("start", port)
    judge, server = fake_judge
    judge.latency_s = 0.03
    topics = Topics.fresh("term-down")
    await create_topics(bootstrap, topics, partitions=PARTITIONS)
    values, _, _ = scored_stream(TRACES)
    await produce(bootstrap, topics.traces, values)
    env = worker_env(topics.env(bootstrap), server.url,
                     DRAIN_TIMEOUT_SECONDS=str(DRAIN_TIMEOUT_S))

    async with WorkerPool(tmp_path) as pool:
        async with VerdictCollector(bootstrap, topics.verdicts) as out:
            worker = await pool.start(env)
            assert await out.wait_for_count(200, timeout_s=90), worker.log()
        await kafka_local_async("stop", port)  # left down: the module's teardown deletes it
        await asyncio.sleep(1.0)  # in-flight verdicts now wait for the broker
        signalled = time.monotonic()
        code = await worker.terminate(timeout_s=60)
        took_s = time.monotonic() - signalled

    print(f"\nSIGTERM with the broker down: exit {code} after {took_s:.1f} s "
          f"(DRAIN_TIMEOUT_SECONDS={DRAIN_TIMEOUT_S:g})")
    assert code == 0
    # The drain, the bounded final commit (5 s) and producer stop (5 s), and some slack:
    # well inside a grace period sized for DRAIN_TIMEOUT_SECONDS.
    assert took_s < DRAIN_TIMEOUT_S + 18
    assert not tracebacks(worker.log())
