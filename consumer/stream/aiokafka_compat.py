"""Every use of aiokafka's private API, in one place (aiokafka pinned to 0.14.x in pyproject).

aiokafka has no public way to do four things the worker needs:

- back off a failed metadata update (``install`` wraps ``AIOKafkaClient._metadata_update``);
- tell a refused login from an unreachable broker (``connection_failures`` reads the cause
  from the records aiokafka's client logs while connecting);
- load one topic's partitions without subscribing (``load_topic``, ``consumer._client``);
- read a transactional producer's state (``transaction_state``, ``producer._txn_manager``).

``install`` is called once the process is about to use Kafka (``run_worker``, the replay and
load-sample commands), never on import. ``tests/unit/stream/test_aiokafka_compat.py`` checks
every assumption made here against the installed aiokafka, so an upgrade that breaks one
fails there, by name, rather than in production.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.client import AIOKafkaClient
from aiokafka.producer.transaction_manager import TransactionState

# aiokafka.client's module logger (``logging.getLogger("aiokafka")``, not ``__name__``): it
# logs ``'Unable connect to "%s:%s": %s', host, port, error`` for each bootstrap server
# it could not connect to, and nowhere else says why.
CLIENT_LOGGER = "aiokafka"


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
MetadataUpdate = Callable[[Any, Any, Any], Awaitable[Any]]  # (client, cluster, topics) -> bool


def install() -> None:
    """Patch aiokafka for the worker (the metadata back-off); idempotent."""
    if not installed():
        AIOKafkaClient._metadata_update = with_backoff(AIOKafkaClient._metadata_update)


def with_backoff(update: MetadataUpdate) -> MetadataUpdate:
    """``update`` (``AIOKafkaClient._metadata_update``), pausing after each failure."""
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

    metadata_update_with_backoff._groundedness_backoff = True  # type: ignore[attr-defined]
    metadata_update_with_backoff.__wrapped__ = update  # type: ignore[attr-defined]
    return metadata_update_with_backoff


def installed() -> bool:
    """Is the metadata back-off in place?"""
    return bool(getattr(AIOKafkaClient._metadata_update, "_groundedness_backoff", False))


# -- why a connection failed ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeldFailure:
    """A connection error aiokafka logged, whose record was kept out of the log."""

    where: str  # host:port
    error: BaseException
    record: logging.LogRecord


@dataclass(slots=True)
class ConnectionFailures:
    """The held-back connection errors, in the order aiokafka logged them."""

    held: list[HeldFailure] = field(default_factory=list)

    def first(self) -> HeldFailure | None:
        """The first one held back, if any."""
        return self.held[0] if self.held else None


class _Sniffer(logging.Filter):
    def __init__(self, hold: Callable[[BaseException], bool]) -> None:
        super().__init__()
        self.hold = hold
        self.failures = ConnectionFailures()

    def filter(self, record: logging.LogRecord) -> bool:
        found = connection_error(record)
        if found is None or not self.hold(found[1]):
            return True
        self.failures.held.append(HeldFailure(*found, record))
        return False


def connection_error(record: logging.LogRecord) -> tuple[str, BaseException] | None:
    """``(host:port, error)`` from one of aiokafka's connection-failure records, else None."""
    args = record.args if isinstance(record.args, tuple) else ()
    error = next((arg for arg in args if isinstance(arg, BaseException)), None)
    if error is None:
        return None
    where = ":".join(str(arg) for arg in args[:2] if isinstance(arg, str | int))
    return where, error


@contextlib.contextmanager
def connection_failures(hold: Callable[[BaseException], bool]) -> Iterator[ConnectionFailures]:
    """Collect the connection errors aiokafka's client logs meanwhile; records whose error
    ``hold`` accepts are kept out of the log (the caller says it better, or logs the first
    with ``release``)."""
    sniffer = _Sniffer(hold)
    logger = logging.getLogger(CLIENT_LOGGER)
    logger.addFilter(sniffer)
    try:
        yield sniffer.failures
    finally:
        logger.removeFilter(sniffer)


def release(failures: ConnectionFailures) -> None:
    """Log the first held-back record after all (another bootstrap server let us in)."""
    if (first := failures.first()) is not None:
        logging.getLogger(CLIENT_LOGGER).handle(first.record)


# -- one topic's partitions -------------------------------------------------------------------


async def load_topic(consumer: AIOKafkaConsumer, topic: str) -> None:
    """Load ``topic``'s partitions into the consumer's metadata and return once loaded.

    What ``assign`` and ``subscribe`` use internally; aiokafka has no public call for it. A
    metadata request naming a missing topic could auto-create it: check it exists first.
    """
    await consumer._client.add_topic(topic)


# -- a transactional producer's state ---------------------------------------------------------


def transaction_state(producer: AIOKafkaProducer) -> TransactionState:
    """Where the producer's transaction state machine is (READY, ABORTABLE_ERROR, ...)."""
    state: TransactionState = producer._txn_manager.state
    return state
