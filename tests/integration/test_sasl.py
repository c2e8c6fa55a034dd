"""The worker on a SASL listener: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.

The session's TLS broker (``tls_broker``, whose SCRAM user its SASL_PLAINTEXT listener has too):
PLAINTEXT for the test's own clients, SASL_PLAINTEXT for the worker, whatever
``KAFKA_BOOTSTRAP_SERVERS`` says. The worker runs as a
subprocess (``groundedness run``): with the right credentials a verdict reaches the verdicts
topic (in both delivery modes, so the transactional producers authenticate too); with wrong
ones it refuses with one ``kafka_auth_failed`` line, exit code 2, no traceback and no
password, and consumes nothing. ``groundedness replay`` starts its clients the same way, so
it refuses wrong credentials in the same line (it used to say it "cannot reach" the broker).
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from consumer.localjudge.server import JudgeServer
from consumer.settings import Settings
from tests.support.fake_judge import ScriptedJudge
from tests.support.streams import (
    Topics,
    create_topics,
    group_offsets,
    produce,
    read_all,
    trace,
    verdicts_by_trace,
)
from tests.support.tls_material import TlsBroker
from tests.support.workers import REPO_ROOT, WorkerPool, tracebacks, wait_committed, worker_env

# One xdist worker runs every module of the session's TLS broker, so it starts once.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("tls_broker")]

WRONG_PASSWORD = "not-the-Password-17"
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


@dataclass(frozen=True)
class SaslBroker:
    """Addresses of the SASL-enabled broker, and its SCRAM (and PLAIN) user."""

    plaintext: str  # for the test's own admin, producer and readers
    sasl: str  # for the worker
    username: str
    password: str


@pytest.fixture
def sasl_broker(tls_broker: TlsBroker) -> SaslBroker:
    """The session's TLS broker, seen through its SASL_PLAINTEXT listener."""
    return SaslBroker(tls_broker.addresses["plaintext"], tls_broker.addresses["sasl"],
                      tls_broker.username, tls_broker.password)


def sasl_env(broker: SaslBroker, topics: Topics, judge_url: str, mechanism: str,
             password: str, **extra: str) -> dict[str, str]:
    return worker_env(
        topics.env(broker.sasl), judge_url,
        KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT", KAFKA_SASL_MECHANISM=mechanism,
        KAFKA_SASL_USERNAME=broker.username, KAFKA_SASL_PASSWORD=password, **extra,
    )


@pytest.mark.parametrize(
    ("mechanism", "delivery"),
    [
        pytest.param("PLAIN", "at_least_once", id="plain"),
        pytest.param("SCRAM-SHA-256", "at_least_once", id="scram-sha-256"),
        pytest.param("SCRAM-SHA-512", "at_least_once", id="scram-sha-512"),
        pytest.param("SCRAM-SHA-512", "exactly_once", id="scram-sha-512-exactly-once"),
    ],
)
async def test_worker_publishes_verdicts_over_sasl(
    sasl_broker: SaslBroker, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    mechanism: str, delivery: str,
) -> None:
    _, server = fake_judge
    topics = Topics.fresh(f"sasl-{mechanism.lower()}")
    await create_topics(sasl_broker.plaintext, topics, partitions=2)
    await produce(sasl_broker.plaintext, topics.traces, [
        trace("grounded", "Paris is the capital. [[score=5]]", retrieved_documents=["Paris."]),
        trace("ungrounded", "The moon is cheese. [[score=1]]", retrieved_documents=["Moon."]),
    ])
    env = sasl_env(sasl_broker, topics, server.url, mechanism, sasl_broker.password,
                   DELIVERY=delivery)

    async with WorkerPool(tmp_path) as pool:
        worker = await pool.start(env)
        records = await read_all(sasl_broker.plaintext, topics.verdicts, at_least=2,
                                 timeout_s=90)
        assert worker.running, worker.log()
        committed, ends = await wait_committed(sasl_broker.plaintext, topics.group,
                                               topics.traces, timeout_s=30)
        assert await worker.terminate() == 0

    verdicts = verdicts_by_trace(records)
    assert {t: [v["verdict"] for v in vs] for t, vs in verdicts.items()} == {
        "grounded": ["pass"], "ungrounded": ["fail"]}
    assert committed == ends
    log = worker.log()
    assert sasl_broker.password not in log
    assert "kafka_auth_failed" not in log
    assert not tracebacks(log)


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_wrong_credentials_are_refused_in_one_line_with_exit_code_2(
    sasl_broker: SaslBroker, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    mechanism: str,
) -> None:
    judge, server = fake_judge
    topics = Topics.fresh(f"sasl-bad-{mechanism.lower()}")
    await create_topics(sasl_broker.plaintext, topics, partitions=1)
    await produce(sasl_broker.plaintext, topics.traces, [trace("t-1", "An answer. [[score=5]]")])
    env = sasl_env(sasl_broker, topics, server.url, mechanism, WRONG_PASSWORD)

    async with WorkerPool(tmp_path) as pool:
        worker = await pool.start(env)
        exit_code = await asyncio.wait_for(worker.process.wait(), timeout=60)

    log = worker.log()
    assert exit_code == 2, log
    refusals = [line for line in log.splitlines() if "kafka_auth_failed" in line]
    assert len(refusals) == 1, log
    (refusal,) = refusals
    assert refusal.startswith("kafka_auth_failed: the broker 127.0.0.1:")
    assert "SaslAuthenticationFailed" in refusal
    assert "KAFKA_SASL_PASSWORD" in refusal
    assert sum("SaslAuthenticationFailed" in line for line in log.splitlines()) == 1
    assert WRONG_PASSWORD not in log
    assert sasl_broker.password not in log
    assert not tracebacks(log)
    assert judge.count() == 0, "nothing was consumed, so nothing was judged"
    committed, _ = await group_offsets(sasl_broker.plaintext, topics.group, topics.traces)
    assert committed == {0: 0}


async def test_replay_with_wrong_credentials_is_refused_in_one_line_with_exit_code_2(
    sasl_broker: SaslBroker, fake_judge: tuple[ScriptedJudge, JudgeServer],
) -> None:
    judge, server = fake_judge
    topics = Topics.fresh("sasl-bad-replay")
    await create_topics(sasl_broker.plaintext, topics, partitions=1)
    await produce(sasl_broker.plaintext, topics.traces, [trace("t-1", "An answer. [[score=5]]")])
    env = sasl_env(sasl_broker, topics, server.url, "SCRAM-SHA-512", WRONG_PASSWORD)
    inherited = {name: value for name, value in os.environ.items()
                 if name.lower() not in Settings.model_fields}
    # ``-m`` from the repository root: the command of the code beside this test.
    replay = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "consumer.cli", "replay", "--from", "2000-01-01T00:00:00Z",
        env=inherited | env, cwd=str(REPO_ROOT), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(replay.communicate(), timeout=60)
    log = output.decode()

    assert "cannot reach" not in log
    assert replay.returncode == 2, log
    refusals = [line for line in log.splitlines() if "kafka_auth_failed" in line]
    assert len(refusals) == 1, log
    (refusal,) = refusals
    assert refusal.startswith("kafka_auth_failed: the broker 127.0.0.1:")
    assert "SaslAuthenticationFailed" in refusal
    assert sum("SaslAuthenticationFailed" in line for line in log.splitlines()) == 1
    assert WRONG_PASSWORD not in log
    assert not tracebacks(log)
    assert judge.count() == 0
    committed, _ = await group_offsets(sasl_broker.plaintext, topics.group, topics.traces)
    assert committed == {0: 0}
