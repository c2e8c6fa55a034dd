"""The worker on the TLS broker: every listener in both delivery modes, and each way it fails.

The session's TLS broker (``tls_broker``, on free ports: PLAINTEXT for the test's own clients,
then ssl, mtls, sasl-ssl, oauth, ssl-wrong-host and ssl-expired for the worker), started after
the token server whose JWKS its OIDC validator reads. The worker runs as a subprocess
(``groundedness run``):

- with the right material each listener carries it through a batch of traces, in
  at_least_once and exactly_once (so the transactional producers handshake too): one verdict
  per trace, the group's offsets at the end;
- with the wrong material it refuses in one line (``kafka_tls_failed``, ``kafka_oauth_failed``
  or a ``KAFKA_SSL_*`` setting), exit code 2, no traceback, no secret, and judges nothing;
- with tokens that expire every 20 s it keeps judging a steady stream for three minutes
  (``slow``): the broker drops each connection once its token expires, the worker fetches a
  new one and reconnects, and no verdict is lost or duplicated.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from consumer.localjudge.server import JudgeServer
from scripts.kafka.certs import CLIENT_KEY_PASSWORD
from tests.support.fake_judge import ScriptedJudge
from tests.support.streams import Topics, create_topics, group_offsets, produce, trace
from tests.support.tls_material import TlsBroker
from tests.support.workers import (
    VerdictCollector,
    Worker,
    WorkerPool,
    scored_stream,
    tally,
    tracebacks,
    wait_committed,
    worker_env,
)

# One xdist worker runs every module of the session's TLS broker, so it starts once.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("tls_broker")]

WRONG_CLIENT_SECRET = "wrong-client-Secret-77"
WRONG_KEY_PASSWORD = "wrong-key-Password-64"


@dataclass(frozen=True)
class Connection:
    """How a team would connect: a listener and the worker's security settings, file names
    relative to the TLS directory (``@name``)."""

    listener: str
    settings: dict[str, str] = field(default_factory=dict)

    def env(self, broker: TlsBroker) -> dict[str, str]:
        resolved = {name: broker.file(value[1:]) if value.startswith("@") else value
                    for name, value in self.settings.items()}
        return {"KAFKA_SSL_CAFILE": broker.file("ca.crt"), **resolved}


def _ssl(**settings: str) -> dict[str, str]:
    return {"KAFKA_SECURITY_PROTOCOL": "SSL", **settings}


def _oauth(broker: TlsBroker, **settings: str) -> dict[str, str]:
    return {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "OAUTHBEARER",
            "KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL": broker.oauth.token_url,
            "KAFKA_SASL_OAUTH_CLIENT_ID": broker.oauth.client_id,
            "KAFKA_SASL_OAUTH_CLIENT_SECRET": broker.oauth.client_secret,
            "KAFKA_SASL_OAUTH_SCOPE": "kafka", **settings}


CLIENT_CERT = {"KAFKA_SSL_CERTFILE": "@client.crt", "KAFKA_SSL_KEYFILE": "@client.key"}
CONNECTIONS = {
    "ssl": Connection("ssl", _ssl()),
    "mtls": Connection("mtls", _ssl(**CLIENT_CERT)),
    "mtls-encrypted-key": Connection("mtls", _ssl(
        KAFKA_SSL_CERTFILE="@client.crt", KAFKA_SSL_KEYFILE="@client-encrypted.key",
        KAFKA_SSL_KEY_PASSWORD=CLIENT_KEY_PASSWORD)),
    "sasl-ssl-scram-sha-512": Connection("sasl-ssl", {
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512"}),
    "oauth": Connection("oauth"),  # settings from the broker's token server: see ``env_for``
}


def env_for(broker: TlsBroker, name: str, topics: Topics, judge_url: str,
            **overrides: str) -> dict[str, str]:
    """The worker's environment for connection ``name``, with ``overrides`` on top."""
    connection = CONNECTIONS[name]
    settings = connection.env(broker)
    if connection.listener == "sasl-ssl":
        settings |= {"KAFKA_SASL_USERNAME": broker.username,
                     "KAFKA_SASL_PASSWORD": broker.password}
    if connection.listener == "oauth":
        settings |= _oauth(broker)
    return worker_env(topics.env(broker.addresses[connection.listener]), judge_url,
                      **(settings | overrides))


def secrets(broker: TlsBroker) -> list[str]:
    """What must never appear in any output: passwords, the client secret, every token."""
    # A token's signature is its own: a log that quoted any part of one would quote it.
    return [CLIENT_KEY_PASSWORD, WRONG_KEY_PASSWORD, broker.password,
            broker.oauth.client_secret, WRONG_CLIENT_SECRET,
            *(issued.token.rsplit(".", 1)[1] for issued in broker.oauth.issued)]


# ---------------------------------------------------------------------------- the matrix


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
@pytest.mark.parametrize("name", list(CONNECTIONS))
async def test_worker_judges_every_trace_once_over_each_listener(
    tls_broker: TlsBroker, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    name: str, delivery: str,
) -> None:
    judge, server = fake_judge
    topics = Topics.fresh(f"tls-{name}-{delivery}")
    plaintext = tls_broker.addresses["plaintext"]
    await create_topics(plaintext, topics, partitions=2)
    values, scores, _ = scored_stream(8, empty_every=100, prefix=f"{name}-{delivery}")
    await produce(plaintext, topics.traces, values)
    env = env_for(tls_broker, name, topics, server.url, DELIVERY=delivery)
    issued_before = tls_broker.oauth.tokens_issued

    async with WorkerPool(tmp_path) as pool, VerdictCollector(plaintext, topics.verdicts) as got:
        worker = await pool.start(env)
        assert await got.wait_for(set(scores), timeout_s=90), worker.log()
        committed, ends = await wait_committed(plaintext, topics.group, topics.traces, 60)
        assert worker.running, worker.log()
        assert await worker.terminate() == 0, worker.log()

    counted = tally(got.verdicts, scores)
    assert (counted.missing, counted.unexpected, counted.wrong, counted.duplicates) == (
        set(), set(), [], 0)
    assert committed == ends
    assert judge.count() == len(scores)
    if name == "oauth":  # one token for every client of the process (consumer, producers)
        assert tls_broker.oauth.tokens_issued - issued_before == 1
    _assert_quiet(worker, tls_broker)


def _assert_quiet(worker: Worker, broker: TlsBroker) -> None:
    log = worker.log()
    assert not tracebacks(log)
    for marker in ("kafka_tls_failed", "kafka_oauth_failed", "kafka_auth_failed"):
        assert marker not in log
    for secret in secrets(broker):
        assert secret not in log


# ---------------------------------------------------------------------------- refusals


@dataclass(frozen=True)
class Refusal:
    """A misconfiguration and the one line it must give (its start, and words it names)."""

    connection: str
    overrides: dict[str, str]
    starts: str
    names: tuple[str, ...]


REFUSALS = {
    "unknown-ca": Refusal("ssl", {"KAFKA_SSL_CAFILE": "@untrusted-ca.crt"},
                          "kafka_tls_failed: the broker 127.0.0.1:", ("unknown CA",
                                                                      "KAFKA_SSL_CAFILE")),
    "hostname-mismatch": Refusal("ssl", {"KAFKA_BOOTSTRAP_SERVERS": "ssl-wrong-host"},
                                 "kafka_tls_failed: the broker 127.0.0.1:",
                                 ("hostname mismatch", "KAFKA_SSL_CHECK_HOSTNAME")),
    "expired-broker-certificate": Refusal(
        "ssl", {"KAFKA_BOOTSTRAP_SERVERS": "ssl-expired"},
        "kafka_tls_failed: the broker 127.0.0.1:", ("has expired",)),
    "untrusted-client-certificate": Refusal(
        "mtls", {"KAFKA_SSL_CERTFILE": "@untrusted-client.crt",
                 "KAFKA_SSL_KEYFILE": "@untrusted-client.key"},
        "kafka_tls_failed: the broker 127.0.0.1:", ("refused the client certificate",
                                                    "KAFKA_SSL_CERTFILE")),
    "expired-client-certificate": Refusal(
        "mtls", {"KAFKA_SSL_CERTFILE": "@expired-client.crt",
                 "KAFKA_SSL_KEYFILE": "@expired-client.key"},
        "kafka_tls_failed: the broker 127.0.0.1:", ("refused the client certificate",)),
    "key-not-matching-certificate": Refusal(
        "mtls", {"KAFKA_SSL_KEYFILE": "@mismatched-client.key"},
        "KAFKA_SSL_KEYFILE does not match the certificate", ("client.crt",)),
    "wrong-key-password": Refusal(
        "mtls-encrypted-key", {"KAFKA_SSL_KEY_PASSWORD": WRONG_KEY_PASSWORD},
        "KAFKA_SSL_KEY_PASSWORD does not decrypt KAFKA_SSL_KEYFILE", ()),
    "wrong-client-secret": Refusal(
        "oauth", {"KAFKA_SASL_OAUTH_CLIENT_SECRET": WRONG_CLIENT_SECRET},
        "kafka_oauth_failed: the token endpoint http://127.0.0.1:",
        ("HTTP 401 invalid_client", "KAFKA_SASL_OAUTH_CLIENT_SECRET")),
    "unreachable-token-endpoint": Refusal(
        "oauth", {"KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL": "http://127.0.0.1:9/token"},
        "kafka_oauth_failed: the token endpoint http://127.0.0.1:9/token: unreachable",
        ("KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL",)),
}


def _resolve(broker: TlsBroker, overrides: dict[str, str], topics: Topics) -> dict[str, str]:
    resolved = {}
    for setting, value in overrides.items():
        if value.startswith("@"):
            value = broker.file(value[1:])
        elif setting == "KAFKA_BOOTSTRAP_SERVERS":
            value = broker.addresses[value]  # a listener's label
        resolved[setting] = value
    return resolved


async def _refused_start(broker: TlsBroker, judge: ScriptedJudge, server: JudgeServer,
                         tmp_path: Path, connection: str, overrides: dict[str, str],
                         tag: str) -> tuple[str, Topics]:
    """Start a worker that must refuse; its whole output, once it exited with code 2."""
    topics = Topics.fresh(f"tls-bad-{tag}")
    await create_topics(broker.addresses["plaintext"], topics, partitions=1)
    await produce(broker.addresses["plaintext"], topics.traces,
                  [trace("t-1", "An answer. [[score=5]]")])
    env = env_for(broker, connection, topics, server.url,
                  **_resolve(broker, overrides, topics))
    async with WorkerPool(tmp_path) as pool:
        worker = await pool.start(env)
        exit_code = await asyncio.wait_for(worker.process.wait(), timeout=60)
    log = worker.log()
    assert exit_code == 2, log
    assert not tracebacks(log), log
    for secret in secrets(broker):
        assert secret not in log
    assert judge.count() == 0, "nothing was consumed, so nothing was judged"
    committed, _ = await group_offsets(broker.addresses["plaintext"], topics.group,
                                       topics.traces)
    assert committed == {0: 0}
    return log, topics


def _the_line(log: str, starts: str) -> str:
    lines = [line for line in log.splitlines() if line.strip()]
    refusals = [line for line in lines if line.startswith(starts)]
    assert len(refusals) == 1, log
    return refusals[0]


@pytest.mark.parametrize("case", list(REFUSALS))
async def test_bad_material_is_refused_in_one_line_with_exit_code_2(
    tls_broker: TlsBroker, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    case: str,
) -> None:
    judge, server = fake_judge
    refusal = REFUSALS[case]
    log, _ = await _refused_start(tls_broker, judge, server, tmp_path, refusal.connection,
                                  refusal.overrides, case)
    line = _the_line(log, refusal.starts)
    for word in refusal.names:
        assert word in line, line
    print(f"{case}: {line}")  # the report quotes these (pytest -s)


@pytest.mark.parametrize("minted", ["foreign-key", "wrong-audience"])
async def test_a_token_the_broker_refuses_is_one_line_with_exit_code_2(
    tls_broker: TlsBroker, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    minted: str,
) -> None:
    """The token endpoint grants a token, the broker refuses it (RFC 7628 error challenge).
    aiokafka alone would log "Authenticated via OAUTHBEARER" and start with no broker."""
    judge, server = fake_judge
    oauth = tls_broker.oauth
    log_before = tls_broker.server_log.stat().st_size
    issued_before = oauth.tokens_issued
    if minted == "foreign-key":
        oauth.forging = True
    else:
        oauth.granted_audience = "another-cluster"
    try:
        log, _ = await _refused_start(tls_broker, judge, server, tmp_path, "oauth", {}, minted)
    finally:
        oauth.forging, oauth.granted_audience = False, None

    line = _the_line(log, "kafka_oauth_failed: the broker 127.0.0.1:")
    assert "refused the OAuth token (invalid_token)" in line
    assert "Authenticated via OAUTHBEARER" not in log
    assert oauth.tokens_issued > issued_before  # the endpoint granted it: the broker refused
    with tls_broker.server_log.open("rb") as server_log:
        server_log.seek(log_before)
        said = server_log.read().decode(errors="replace")
    assert ("invalid signature" if minted == "foreign-key" else "Audience (aud) claim") in said
    print(f"{minted}: {line}")


# ---------------------------------------------------------------------------- token refresh

REVOKED_LIFETIME_S = 6


async def test_a_secret_revoked_while_running_stops_the_worker_with_exit_code_2(
    tls_broker: TlsBroker, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
) -> None:
    """The worker judges with 6 s tokens; then the endpoint refuses the client (a revoked
    secret). Once its token expired the broker drops the connections, and aiokafka, which
    swallows the refusal in its background connections, would retry for ever: the worker
    drains and exits with the one line instead."""
    _, server = fake_judge
    oauth = tls_broker.oauth
    topics = Topics.fresh("tls-revoked")
    plaintext = tls_broker.addresses["plaintext"]
    await create_topics(plaintext, topics, partitions=1)
    await produce(plaintext, topics.traces, [trace("t-1", "An answer. [[score=5]]")])
    oauth.lifetime_s = REVOKED_LIFETIME_S
    try:
        async with (WorkerPool(tmp_path) as pool,
                    VerdictCollector(plaintext, topics.verdicts) as got):
            worker = await pool.start(env_for(tls_broker, "oauth", topics, server.url))
            assert await got.wait_for({"t-1"}, timeout_s=60), worker.log()[-3000:]
            requests_before = oauth.token_requests
            oauth.refusing = True
            exit_code = await asyncio.wait_for(worker.process.wait(), timeout=120)
            refused_requests = oauth.token_requests - requests_before
    finally:
        oauth.refusing, oauth.lifetime_s = False, 3600
    log = worker.log()
    assert exit_code == 2, log[-3000:]
    line = _the_line(log, "kafka_oauth_failed: ")
    assert line == (
        f"kafka_oauth_failed: the token endpoint {oauth.token_url}: refused the client: "
        "HTTP 401 invalid_client (check KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL, "
        "KAFKA_SASL_OAUTH_CLIENT_ID, KAFKA_SASL_OAUTH_CLIENT_SECRET and KAFKA_SASL_OAUTH_SCOPE)")
    assert not tracebacks(log), log[-3000:]
    for secret in secrets(tls_broker):
        assert secret not in log
    # Refused while the token was valid: logged and retried (1 s doubling); then it stopped.
    assert 1 <= refused_requests <= 10, (refused_requests, log[-3000:])
    print(f"revoked: exit 2 after {refused_requests} refused token requests: {line}")
