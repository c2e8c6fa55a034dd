"""What ``consumer/kafka/compat.py`` relies on in aiokafka's private API.

Each test names the assumption it checks, so an aiokafka upgrade that breaks one fails here
with a message saying what changed (and pyproject.toml pins the range these were checked on).
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
from typing import Any

import aiokafka.client
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.abc import AbstractTokenProvider
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import AIOKafkaConnection, OAuthAuthenticator
from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed
from aiokafka.producer.transaction_manager import TransactionState

from consumer.kafka import compat as aiokafka_compat
from consumer.kafka.auth.oauth import OAuthTokenRejected
from consumer.kafka.errors import Refuse, map_kafka_error
from consumer.worker import _stop_consumer
from tests.support.logs import collected_records
from tests.support.ports import free_port

UPGRADE = "aiokafka changed under consumer/kafka/compat.py: "


def _original_metadata_update() -> Any:
    update = AIOKafkaClient._metadata_update
    return getattr(update, "__wrapped__", update)


def test_metadata_update_is_a_coroutine_method_taking_cluster_and_topics() -> None:
    update = _original_metadata_update()
    assert inspect.iscoroutinefunction(update), (
        UPGRADE + "AIOKafkaClient._metadata_update is no longer a coroutine function")
    parameters = list(inspect.signature(update).parameters)
    assert parameters == ["self", "cluster_metadata", "topics"], (
        UPGRADE + f"AIOKafkaClient._metadata_update takes {parameters}; the back-off wrapper "
        "passes (client, cluster, topics)")


def test_the_metadata_synchroniser_and_fetch_all_metadata_call_the_patched_method() -> None:
    """The patch is a class attribute looked up at call time; a caller holding its own
    reference (or a renamed method) would bypass the back-off."""
    for caller in ("_md_synchronizer", "fetch_all_metadata"):
        source = inspect.getsource(getattr(AIOKafkaClient, caller))
        assert "self._metadata_update(" in source, (
            UPGRADE + f"AIOKafkaClient.{caller} no longer calls self._metadata_update")


async def test_a_failed_update_waits_longer_each_time_and_a_success_resets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = iter([False, False, False, True, False])
    slept: list[float] = []

    async def update(client: Any, cluster: Any, topics: Any) -> bool:
        return next(answers)

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    patched = aiokafka_compat.with_backoff(update)
    monkeypatch.setattr(asyncio, "sleep", sleep)
    client = AIOKafkaClient(bootstrap_servers="broker-0:9092")
    results = [await patched(client, None, None) for _ in range(5)]
    assert results == [False, False, False, True, False]
    assert slept == [0.1, 0.2, 0.4, 0.1]


def test_install_is_explicit_idempotent_and_wraps_the_original_once() -> None:
    """In a fresh interpreter: importing the worker's modules patches nothing."""
    script = """
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import AIOKafkaConnection
original = AIOKafkaClient._metadata_update
original_oauth = AIOKafkaConnection.authenticator_oauth
import consumer.cli, consumer.wiring, consumer.worker
import consumer.replay.passes, consumer.load_sample
from consumer.kafka import compat as aiokafka_compat
from consumer.kafka.errors import Refuse, map_kafka_error
from consumer.kafka.auth.oauth import OAuthTokenRejected
assert AIOKafkaClient._metadata_update is original, "patched on import"
assert AIOKafkaConnection.authenticator_oauth is original_oauth, "patched on import"
assert not aiokafka_compat.installed()
aiokafka_compat.install()
patched = AIOKafkaClient._metadata_update
aiokafka_compat.install()
assert AIOKafkaClient._metadata_update is patched, "installed twice"
patched_oauth = AIOKafkaConnection.authenticator_oauth
assert patched_oauth is not original_oauth
aiokafka_compat.install()
assert AIOKafkaConnection.authenticator_oauth is patched_oauth, "installed twice"
assert patched.__wrapped__ is original
assert aiokafka_compat.installed()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_the_client_logs_connection_failures_under_the_sniffed_logger() -> None:
    assert aiokafka.client.log.name == aiokafka_compat.CLIENT_LOGGER, (
        UPGRADE + f"aiokafka.client logs under {aiokafka.client.log.name!r}")


async def test_a_refused_login_is_read_from_the_bootstrap_log_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiokafka.client.bootstrap logs ``(host, port, error)`` and raises a bare
    KafkaConnectionError: the cause is found in the record, and the record is held back."""
    refusal = SaslAuthenticationFailed("Authentication failed: Invalid username or password")

    async def create_conn(host: str, port: int, **options: Any) -> Any:
        raise refusal

    assert hasattr(aiokafka.client, "create_conn"), UPGRADE + "aiokafka.client.create_conn"
    monkeypatch.setattr(aiokafka.client, "create_conn", create_conn)
    client = AIOKafkaClient(bootstrap_servers="broker-1:9094")
    with (collected_records(aiokafka_compat.CLIENT_LOGGER) as seen,
          aiokafka_compat.connection_failures(hold=lambda e: True) as failures,
          pytest.raises(KafkaConnectionError)):
        await client.bootstrap()
    first = failures.first()
    assert first is not None, UPGRADE + "no (host, port, error) record while bootstrapping"
    assert (first.where, first.error) == ("broker-1:9094", refusal), (
        UPGRADE + f"the bootstrap record's args are {first.record.args!r}")
    assert seen == [], "a held record still reached the log"


async def test_load_topic_asks_the_consumers_client_to_track_the_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers="broker-0:9092")
    client = getattr(consumer, "_client", None)
    assert isinstance(client, AIOKafkaClient), UPGRADE + "AIOKafkaConsumer._client"
    parameters = list(inspect.signature(AIOKafkaClient.add_topic).parameters)
    assert parameters == ["self", "topic"], UPGRADE + f"add_topic takes {parameters}"
    forced: list[bool] = []

    def force_metadata_update() -> asyncio.Future[bool]:
        forced.append(True)
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        done.set_result(True)
        return done

    monkeypatch.setattr(client, "force_metadata_update", force_metadata_update)
    try:
        await asyncio.wait_for(aiokafka_compat.load_topic(consumer, "traces"), 1.0)
        assert forced == [True], UPGRADE + "add_topic did not ask for a metadata update"
        await asyncio.wait_for(aiokafka_compat.load_topic(consumer, "traces"), 1.0)
        assert forced == [True], "a tracked topic is loaded already"
    finally:
        await consumer.stop()  # never started: closes it without a broker


class RetrySleepingFetcher:
    """aiokafka 0.14's ``Fetcher.close()`` where it matters: it cancels its pending fetch
    tasks and awaits each, so one caught in its retry sleep re-raises CancelledError."""

    def __init__(self) -> None:
        self.fetch = asyncio.get_running_loop().create_task(asyncio.sleep(3600))

    async def close(self) -> None:
        for task in [self.fetch]:
            task.cancel()
            await task


def interrupted_consumer() -> tuple[AIOKafkaConsumer, asyncio.Task[None], RetrySleepingFetcher]:
    """A consumer as ``start()`` leaves it (its client's metadata sync task, a fetcher) with
    a fetch task in its retry sleep: ``stop()`` re-raises that CancelledError before its last
    step, closing the client. No broker is needed: nothing here connects."""
    consumer = AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{free_port()}")
    sync_task = asyncio.get_running_loop().create_task(asyncio.sleep(3600))
    consumer._client._sync_task = sync_task  # what bootstrap() starts
    consumer._fetcher = fetcher = RetrySleepingFetcher()
    return consumer, sync_task, fetcher


async def test_a_stop_cut_short_by_a_fetch_task_still_closes_the_client() -> None:
    consumer, sync_task, fetcher = interrupted_consumer()
    await asyncio.sleep(0)
    await _stop_consumer(consumer)
    assert fetcher.fetch.cancelled()
    assert sync_task.cancelled(), "the client's metadata sync task outlived the consumer"
    assert consumer._client._sync_task is None, UPGRADE + "AIOKafkaClient.close()"


async def test_a_cancel_while_closing_the_client_is_not_swallowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer, sync_task, _ = interrupted_consumer()
    closing = asyncio.Event()

    async def slow_close() -> None:  # a broker that no longer answers
        closing.set()
        await asyncio.sleep(3600)

    monkeypatch.setattr(consumer._client, "close", slow_close)
    stopping = asyncio.ensure_future(_stop_consumer(consumer))
    await asyncio.wait_for(closing.wait(), 10)  # no client close at all: fails, not hangs
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    sync_task.cancel()


async def test_closing_the_client_is_bounded_and_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{free_port()}")
    never = asyncio.Event()

    async def hanging_close() -> None:  # connections to a broker that stopped answering
        await never.wait()

    monkeypatch.setattr(consumer._client, "close", hanging_close)
    await aiokafka_compat.close_client(consumer, timeout_s=0.01)

    async def failing_close() -> None:
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr(consumer._client, "close", failing_close)
    await aiokafka_compat.close_client(consumer)
    monkeypatch.undo()
    await consumer.stop()  # never started: closes it without a broker


async def test_transaction_state_reads_the_producers_transaction_manager() -> None:
    producer = AIOKafkaProducer(bootstrap_servers="broker-0:9092", transactional_id="t-1")
    try:
        state = aiokafka_compat.transaction_state(producer)
    finally:
        await producer.stop()  # never started: closes it without a broker
    assert state == TransactionState.UNINITIALIZED, UPGRADE + "AIOKafkaProducer._txn_manager"
    for name in ("READY", "ABORTABLE_ERROR", "FATAL_ERROR"):
        assert hasattr(TransactionState, name), UPGRADE + f"TransactionState.{name}"


# -- a refused OAUTHBEARER token --------------------------------------------------------------


class _FixedToken(AbstractTokenProvider):  # type: ignore[misc]
    async def token(self) -> str:
        return "header.claims.signature"


def test_the_connection_builds_its_oauth_authenticator_through_one_method() -> None:
    source = inspect.getsource(AIOKafkaConnection._do_sasl_handshake)
    assert "self.authenticator_oauth()" in source, (
        UPGRADE + "_do_sasl_handshake no longer asks authenticator_oauth() for OAUTHBEARER")
    assert "authenticator.step(auth_bytes)" in source, (
        UPGRADE + "_do_sasl_handshake no longer passes the server's bytes to step()")
    assert "auth_bytes = resp.sasl_auth_bytes" in source, (
        UPGRADE + "the server's SaslAuthenticate bytes no longer reach the next step")
    authenticator = OAuthAuthenticator(sasl_oauth_token_provider=_FixedToken())
    assert authenticator._token_sent is False, UPGRADE + "OAuthAuthenticator._token_sent"


async def test_the_servers_error_challenge_is_a_refused_token() -> None:
    """RFC 7628 3.2.2: ``{"status":"invalid_token"}`` after the token is a refusal; aiokafka's
    own authenticator returns None there, i.e. "authenticated"."""
    challenge = b'{"status":"invalid_token","scope":"","openid-configuration":""}'
    assert await OAuthAuthenticator(sasl_oauth_token_provider=_FixedToken()).step(
        None) is not None
    plain = OAuthAuthenticator(sasl_oauth_token_provider=_FixedToken())
    await plain.step(None)
    assert await plain.step(challenge) is None, "aiokafka now reads the challenge itself"

    aware = aiokafka_compat.ChallengeAwareOAuthAuthenticator(
        sasl_oauth_token_provider=_FixedToken())
    first = await aware.step(None)
    assert first is not None
    assert first[0].startswith(b"n,,\x01auth=Bearer ")
    with pytest.raises(OAuthTokenRejected) as refused:
        await aware.step(challenge)
    assert refused.value.args == ("invalid_token",)


async def test_an_empty_server_answer_is_success() -> None:
    aware = aiokafka_compat.ChallengeAwareOAuthAuthenticator(
        sasl_oauth_token_provider=_FixedToken())
    await aware.step(None)
    assert await aware.step(b"") is None


@pytest.mark.parametrize(("payload", "said"), [
    (b'{"status":"invalid_token"}', "invalid_token"),
    (b'{"status":"insufficient_scope","scope":"kafka"}', "insufficient_scope"),
    (b"\xff\xfe not json at all", "an unreadable answer of 18 bytes"),
    (b'{"status":"<script>quoted back: secret-token</script>"}',
     "an error challenge without a status"),
    (b'["status"]', "an unreadable answer of 10 bytes"),
])
def test_only_the_challenges_status_is_said(payload: bytes, said: str) -> None:
    assert aiokafka_compat.challenge_status(payload) == said


def test_a_refused_token_is_one_oauth_line_naming_the_broker() -> None:
    action = map_kafka_error(OAuthTokenRejected("invalid_token"), "broker-1:9098")
    assert isinstance(action, Refuse)
    assert action.message.startswith(
        "kafka_oauth_failed: the broker broker-1:9098 refused the OAuth token (invalid_token)")
    assert "KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL" in action.message
    assert "KAFKA_SASL_PASSWORD" not in action.message  # not the SCRAM hint
