"""Connection options shared by every Kafka client the worker makes (security included), and
the one place that tells a rejected login from an unreachable broker.

Every client goes through ``client_options``: the consumer (``source.create_consumer``), the
producer and the transactional producers (``app.create_producer``); the worker makes no admin
client.

aiokafka's ``start()`` raises the same ``KafkaConnectionError("Unable to bootstrap ...")``
for a refused connection and for a broker that rejected our SASL credentials: the cause is
only logged (as an argument of aiokafka's log record) and never attached to the exception.
``start_client`` watches aiokafka's log records during ``start()`` for an authentication
error, so that bad credentials (a configuration error: one line, exit code 2) are not
retried forever like an unreachable broker (transient: retry with backoff).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import (
    AuthenticationFailedError,
    KafkaConnectionError,
    ProducerFenced,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.helpers import create_ssl_context

from consumer.errors import ConfigError
from consumer.settings import Settings

AUTH_ERRORS = (SaslAuthenticationFailed, AuthenticationFailedError, UnsupportedSaslMechanismError)
_AIOKAFKA_LOGGER = "aiokafka"  # aiokafka.client logs connection failures under this name


def client_options(settings: Settings, client_id: str = "groundedness-worker") -> dict[str, Any]:
    """Bootstrap servers, client id and the SASL/TLS settings, for aiokafka's constructors."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.kafka_bootstrap_servers,
        "client_id": client_id,
        "security_protocol": settings.kafka_security_protocol,
    }
    if settings.kafka_security_protocol in ("SSL", "SASL_SSL"):
        options["ssl_context"] = create_ssl_context(cafile=settings.kafka_ssl_cafile)
    if settings.kafka_security_protocol.startswith("SASL_"):
        password = settings.kafka_sasl_password
        options["sasl_mechanism"] = settings.kafka_sasl_mechanism
        options["sasl_plain_username"] = settings.kafka_sasl_username
        options["sasl_plain_password"] = password.get_secret_value() if password else None
    return options


class Startable(Protocol):
    """A Kafka client that connects on ``start()``."""

    async def start(self) -> None: ...


async def start_client(client: Startable) -> None:
    """``client.start()``; ConfigError ``kafka_auth_failed`` when the broker refused the login.

    Any other failure propagates as it is (``KafkaConnectionError`` while unreachable).
    aiokafka's own log line about the refusal is held back, as this error says it all.
    """
    rejected = _AuthFailures()
    logger = logging.getLogger(_AIOKAFKA_LOGGER)
    logger.addFilter(rejected)
    try:
        await client.start()
    except KafkaConnectionError:
        if rejected.reason is not None:
            raise ConfigError(
                f"kafka_auth_failed: {rejected.reason} (check KAFKA_SASL_MECHANISM, "
                "KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD)"
            ) from None
        raise
    finally:
        logger.removeFilter(rejected)
    if rejected.record is not None:  # another bootstrap server let us in: keep the line
        logger.handle(rejected.record)


class _AuthFailures(logging.Filter):
    """Holds back the first authentication error aiokafka logs, and says what it was."""

    def __init__(self) -> None:
        super().__init__()
        self.reason: str | None = None
        self.record: logging.LogRecord | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        error = next((arg for arg in args if isinstance(arg, AUTH_ERRORS)), None)
        if error is None:
            return True
        if self.record is None:
            where = ":".join(str(arg) for arg in args[:2] if isinstance(arg, str | int))
            self.reason = f"the broker {where} refused the credentials: {error}"[:400]
            self.record = record
        return False


# -- a failed metadata update backs off ------------------------------------------------------
#
# While no broker answers, aiokafka's metadata update fails at once (connection refused) and
# resolves its future with False straight away; a caller that forces an update and waits for
# it then loops without any pause. The producer's sender does exactly that whenever a batch
# waits for a partition whose leader became unknown, i.e. whenever the broker goes down with
# verdicts in flight: measured on a stopped local broker, about 1,000 updates a second, a CPU
# core, and 2,000 aiokafka ERROR lines a second until the broker is back. A failed update now
# waits before it reports (0.1 s, doubling to 2 s; back to 0.1 s after a success), which
# throttles every such caller; an update that succeeds is not delayed.
METADATA_RETRY_BACKOFF_S = (0.1, 2.0)


def _install_metadata_backoff() -> None:
    update = AIOKafkaClient._metadata_update
    failures: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    async def metadata_update_with_backoff(client: Any, cluster: Any, topics: Any) -> Any:
        updated = await update(client, cluster, topics)
        if updated:
            failures.pop(client, None)
        else:
            failures[client] = count = failures.get(client, 0) + 1
            first_s, max_s = METADATA_RETRY_BACKOFF_S
            await asyncio.sleep(min(max_s, first_s * 2 ** (count - 1)))
        return updated

    AIOKafkaClient._metadata_update = metadata_update_with_backoff


_install_metadata_backoff()  # on import: every client the worker makes is built after it


# -- a fenced producer's leftovers -------------------------------------------------------------
#
# A fenced transactional producer fails every future it holds (pending batches, the
# transaction's waiter) with the same ProducerFenced, and nobody awaits most of them; asyncio
# then logs each as "Future exception was never retrieved" with a traceback (measured: 2-4
# ERROR lines per fenced producer). The worker has already said it in one line
# (``transactional_producer_lost``) and replaced the producer, so those are dropped; any
# other unhandled exception still goes to the loop's default handler.


def quiet_fenced_futures(loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
    """Install the loop exception handler that drops a fenced producer's leftovers; returns
    what puts the previous handler back."""
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if isinstance(context.get("exception"), ProducerFenced) and "future" in context:
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    return lambda: loop.set_exception_handler(previous)
