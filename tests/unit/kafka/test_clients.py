"""``start_client``: the one way a Kafka client starts, and what the failure map makes of it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import aiokafka.client
import pytest
import structlog
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, SaslAuthenticationFailed

from consumer.errors import ConfigError
from consumer.kafka import clients
from consumer.kafka.clients import client_options, start_client
from consumer.kafka.compat import CLIENT_LOGGER
from consumer.settings import Settings
from tests.support.logs import collected_records

REFUSAL = SaslAuthenticationFailed("Authentication failed during authentication")


class FakeClient:
    """Fails ``start()`` with each of ``failures`` in turn (logging what aiokafka would log
    for a ``(host, port, error)`` cause first), then starts."""

    def __init__(self, *failures: tuple[BaseException | None, BaseException]) -> None:
        self._failures = list(failures)
        self.starts = 0

    async def start(self) -> None:
        self.starts += 1
        if not self._failures:
            return
        logged, raised = self._failures.pop(0)
        if logged is not None:
            logging.getLogger(CLIENT_LOGGER).error(
                'Unable connect to "%s:%s": %s', "broker-1", 9094, logged)
        raise raised


@pytest.fixture
def aiokafka_records() -> Iterator[list[logging.LogRecord]]:
    """What reaches the aiokafka logger's handlers."""
    with collected_records(CLIENT_LOGGER) as records:
        yield records


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clients, "FIRST_RETRY_S", 0.01)


UNREACHABLE = KafkaConnectionError("Unable to bootstrap from [('broker-1', 9094)]")


async def test_a_refused_login_is_one_config_error_and_its_log_line_is_held_back(
    aiokafka_records: list[logging.LogRecord],
) -> None:
    client = FakeClient((REFUSAL, UNREACHABLE))
    with pytest.raises(ConfigError) as refused:
        await start_client(client, "consumer", bootstrap="broker-1:9094", stop=asyncio.Event())
    assert str(refused.value).startswith(
        f"kafka_auth_failed: the broker broker-1:9094 refused the credentials: {REFUSAL} (")
    assert client.starts == 1, "a refused login is never retried"
    assert aiokafka_records == []


async def test_the_real_client_refused_at_bootstrap_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def create_conn(host: str, port: int, **options: Any) -> Any:
        raise REFUSAL

    monkeypatch.setattr(aiokafka.client, "create_conn", create_conn)

    class Bootstrapping:
        def __init__(self) -> None:
            self.client = AIOKafkaClient(bootstrap_servers="broker-1:9094")

        async def start(self) -> None:
            await self.client.bootstrap()  # what AIOKafkaConsumer/Producer.start() do first

    with pytest.raises(ConfigError, match=r"^kafka_auth_failed: the broker broker-1:9094 "):
        await start_client(Bootstrapping(), "producer", bootstrap="broker-1:9094")


async def test_the_worker_retries_an_unreachable_broker_until_it_answers_saying_so_once(
    aiokafka_records: list[logging.LogRecord],
) -> None:
    refused = ConnectionRefusedError(111, "Connect call failed")
    client = FakeClient((refused, UNREACHABLE), (refused, UNREACHABLE), (None, UNREACHABLE))
    with structlog.testing.capture_logs() as logs:
        started = await start_client(client, "consumer", bootstrap="b:9", stop=asyncio.Event())
    assert started
    assert client.starts == 4
    assert [(e["event"], e["client"], e["attempts"]) for e in logs] == [
        ("kafka_unreachable", "consumer", 1), ("kafka_reached", "consumer", 4)]
    assert logs[0]["detail"] == ("cannot reach b:9 (broker-1:9094: [Errno 111] Connect call "
                                 "failed): retrying with backoff up to 30 s, said again once "
                                 "a minute")
    assert aiokafka_records == [], "aiokafka's line per attempt and server is held back"


async def test_a_broker_still_unreachable_is_said_again_at_most_every_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(clients, "UNREACHABLE_LOG_EVERY_S", 0.05)
    monkeypatch.setattr(clients, "MAX_RETRY_S", 0.02)
    client = FakeClient(*[(None, UNREACHABLE)] * 12)
    with structlog.testing.capture_logs() as logs:
        assert await start_client(client, "consumer", bootstrap="b:9", stop=asyncio.Event())
    said = [e for e in logs if e["event"] == "kafka_unreachable"]
    assert 2 <= len(said) < 12, "again after the interval, not once per attempt"
    assert said[-1]["attempts"] > said[0]["attempts"] == 1


async def test_a_stop_ends_the_retries_without_starting() -> None:
    stop = asyncio.Event()
    stop.set()
    client = FakeClient()
    assert not await start_client(client, "consumer", bootstrap="b:9", stop=stop)
    assert client.starts == 0


async def test_a_command_reports_an_unreachable_broker_at_once() -> None:
    client = FakeClient((None, UNREACHABLE))
    with pytest.raises(ConfigError) as unreachable:
        await start_client(client, "replay reader", bootstrap="broker-1:9094")
    assert str(unreachable.value) == (
        "KAFKA_BOOTSTRAP_SERVERS: cannot reach broker-1:9094 "
        "(KafkaConnectionError: Unable to bootstrap from [('broker-1', 9094)])")
    assert client.starts == 1


async def test_other_failures_propagate_as_they_are() -> None:
    with pytest.raises(KafkaTimeoutError):
        await start_client(FakeClient((None, KafkaTimeoutError())), "producer", bootstrap="b:9")


async def test_a_refusal_by_one_server_is_logged_once_another_let_us_in(
    aiokafka_records: list[logging.LogRecord],
) -> None:
    class OneRefuses:
        async def start(self) -> None:
            logging.getLogger(CLIENT_LOGGER).error(
                'Unable connect to "%s:%s": %s', "broker-1", 9094, REFUSAL)

    assert await start_client(OneRefuses(), "consumer", bootstrap="b:9")
    assert [record.args for record in aiokafka_records] == [("broker-1", 9094, REFUSAL)]


@pytest.mark.parametrize(
    ("protocol", "expected"),
    [
        pytest.param("PLAINTEXT", set(), id="plaintext"),
        pytest.param("SASL_PLAINTEXT", {"sasl_mechanism", "sasl_plain_username",
                                        "sasl_plain_password"}, id="sasl"),
    ],
)
def test_client_options_carry_security_only_when_asked(protocol: str, expected: set[str]) -> None:
    # A password left behind (a whole Secret mounted) never reaches a plaintext client's
    # options; a mechanism or username with PLAINTEXT is refused at start, so only with SASL.
    sasl = {"kafka_sasl_mechanism": "PLAIN", "kafka_sasl_username": "u"} if expected else {}
    settings = Settings.model_validate(
        {"kafka_security_protocol": protocol, "kafka_sasl_password": "p", **sasl})
    options = client_options(settings, "c-1")
    base = {"bootstrap_servers", "client_id", "security_protocol"}
    assert set(options) == base | expected
    assert options["client_id"] == "c-1"
    if expected:
        assert options["sasl_plain_password"] == "p"
