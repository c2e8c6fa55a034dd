"""Every use of aiokafka's private API, in one place (aiokafka pinned to 0.14.x in pyproject).

aiokafka has no public way to do nine things the worker needs:

- back off a failed metadata update (``install`` wraps ``AIOKafkaClient._metadata_update``);
- tell a refused login from an unreachable broker (``connection_failures`` reads the cause
  from the records aiokafka's client logs while connecting);
- load one topic's partitions without subscribing (``load_topic``, ``consumer._client``);
- close a consumer's client when ``stop()`` was cut short (``close_client``,
  ``consumer._client``);
- read a transactional producer's state (``transaction_state``, ``producer._txn_manager``);
- reach a client's OAUTHBEARER token provider, to fetch the first token before connecting
  (``oauth_token_provider``: ``_sasl_oauth_token_provider`` of the consumer's ``_client``,
  the producer's ``client``);
- notice that the broker refused an OAUTHBEARER token (``install`` makes
  ``AIOKafkaConnection.authenticator_oauth`` return ``ChallengeAwareOAuthAuthenticator``);
- read a commit's metadata (``committed_with_metadata``: the coordinator's OffsetFetch);
- tell whether a partition is read to its end without awaiting (``read_to_end``: the
  subscription's position and pauses).

``install`` is called once the process is about to use Kafka (``run_worker``, the replay and
load-sample commands), never on import. ``tests/unit/kafka/test_compat.py`` checks
every assumption made here against the installed aiokafka, so an upgrade that breaks one
fails there, by name, rather than in production.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import weakref
from collections.abc import Awaitable, Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import AbstractTokenProvider
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import AIOKafkaConnection, OAuthAuthenticator
from aiokafka.producer.transaction_manager import TransactionState

from consumer.kafka import client_logs
from consumer.kafka.auth.oauth import OAuthTokenRejected

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
    """Patch aiokafka for the worker (the metadata back-off, the OAUTHBEARER refusal) and
    quiet the log lines a normal start makes errors of (``client_logs.py``); idempotent."""
    if not getattr(AIOKafkaClient._metadata_update, "_groundedness_backoff", False):
        AIOKafkaClient._metadata_update = with_backoff(AIOKafkaClient._metadata_update)
    if not getattr(AIOKafkaConnection.authenticator_oauth, "_groundedness_challenge", False):
        AIOKafkaConnection.authenticator_oauth = _challenge_aware_authenticator
    client_logs.install()


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
    """Are the metadata back-off and the OAUTHBEARER refusal in place?"""
    return bool(getattr(AIOKafkaClient._metadata_update, "_groundedness_backoff", False)
                and getattr(AIOKafkaConnection.authenticator_oauth,
                            "_groundedness_challenge", False))


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


async def refresh_metadata(consumer: AIOKafkaConsumer) -> None:
    """Fetch the metadata of the topics the consumer knows now: a known topic's new
    partitions are otherwise seen only at the next refresh (``metadata_max_age_ms``, 5 min)."""
    await consumer._client.force_metadata_update()


# -- a consumer's client, when stop() did not reach it ----------------------------------------

CLIENT_CLOSE_TIMEOUT_S = 5.0


async def close_client(consumer: AIOKafkaConsumer,
                       timeout_s: float = CLIENT_CLOSE_TIMEOUT_S) -> None:
    """Close ``consumer._client`` (its connections and its metadata sync task): the last
    step of ``AIOKafkaConsumer.stop()``, which aiokafka 0.14 skips when ``Fetcher.close()``
    re-raises a fetch task's CancelledError. Bounded, its errors suppressed: the consumer
    is being abandoned, and a broker gone must not hold the exit. A cancel of the caller
    still propagates."""
    with contextlib.suppress(Exception):  # TimeoutError too
        await asyncio.wait_for(consumer._client.close(), timeout_s)


# -- a transactional producer's state ---------------------------------------------------------


def transaction_state(producer: AIOKafkaProducer) -> TransactionState:
    """Where the producer's transaction state machine is (READY, ABORTABLE_ERROR, ...)."""
    state: TransactionState = producer._txn_manager.state
    return state


# -- a client's OAUTHBEARER token provider ----------------------------------------------------


def oauth_token_provider(client: object) -> AbstractTokenProvider | None:
    """The token provider ``client`` (an AIOKafkaConsumer or AIOKafkaProducer) was built
    with, else None (another mechanism, or not an aiokafka client)."""
    inner = getattr(client, "_client", None) or getattr(client, "client", None)
    provider = getattr(inner, "_sasl_oauth_token_provider", None)
    return provider if isinstance(provider, AbstractTokenProvider) else None


# -- a refused OAUTHBEARER token --------------------------------------------------------------
#
# RFC 7628 3.2.2: a server that refuses the token answers the client's first message with an
# error challenge, ``{"status":"invalid_token",...}``, in a SaslAuthenticate response whose
# error code is 0; the exchange only fails once the client answers it. aiokafka 0.14's
# OAuthAuthenticator ignores that challenge (its next step returns None), logs "Authenticated
# via OAUTHBEARER" and sends Metadata on a connection the broker then drops: start() passed
# with no broker known and every request failed after, with nothing saying why (measured on
# the test broker with a token signed by a foreign key). The authenticator below reads the
# challenge and raises ``OAuthTokenRejected``; aiokafka's bootstrap logs it as a connection
# failure, and ``kafka_errors`` makes it one ``kafka_oauth_failed`` line.


class ChallengeAwareOAuthAuthenticator(OAuthAuthenticator):  # type: ignore[misc]
    """aiokafka's OAUTHBEARER authenticator, failing on the server's error challenge."""

    async def step(self, payload: bytes | None) -> tuple[bytes, bool] | None:
        if self._token_sent and payload:  # a success is an empty response (RFC 7628 3.2.1)
            provider = self._sasl_oauth_token_provider
            raise OAuthTokenRejected(challenge_status(payload),
                                     rejected_hint=getattr(provider, "rejected_hint", None))
        step: tuple[bytes, bool] | None = await super().step(payload)
        return step


def challenge_status(payload: bytes) -> str:
    """The ``status`` of an RFC 7628 error challenge (``invalid_token``...), else a summary:
    never the whole payload, which a server may fill with anything."""
    try:
        status = json.loads(payload.decode()).get("status")
    except (ValueError, UnicodeDecodeError, AttributeError):
        return f"an unreadable answer of {len(payload)} bytes"
    if isinstance(status, str) and status.replace("_", "").isalnum():
        return status[:40]
    return "an error challenge without a status"


def _challenge_aware_authenticator(connection: AIOKafkaConnection) -> OAuthAuthenticator:
    return ChallengeAwareOAuthAuthenticator(
        sasl_oauth_token_provider=connection._sasl_oauth_token_provider)


_challenge_aware_authenticator._groundedness_challenge = True  # type: ignore[attr-defined]


# -- the commit's metadata and the read frontier --------------------------------------------------


async def committed_with_metadata(
    consumer: AIOKafkaConsumer, partitions: Collection[TopicPartition]
) -> dict[TopicPartition, tuple[int, str]]:
    """The group's committed offsets of ``partitions`` with their metadata strings (those
    without a commit are left out). aiokafka's ``committed()`` drops the metadata; its
    coordinator's OffsetFetch keeps it."""
    fetched = await consumer._coordinator.fetch_committed_offsets(list(partitions))
    return {tp: (meta.offset, meta.metadata or "") for tp, meta in fetched.items()
            if meta.offset >= 0}


def read_to_end(consumer: AIOKafkaConsumer, tp: TopicPartition) -> bool:
    """Has every record of ``tp`` available on the broker been handed out, and is it not
    paused? (The position passes transaction markers, so it is compared, not the last
    record's offset; the end is the last stable offset under read_committed.)"""
    subscription = consumer._subscription
    if not subscription.is_assigned(tp) or tp in subscription.paused_partitions():
        return False
    state = subscription.subscription.assignment.state_value(tp)
    end = consumer.last_stable_offset(tp)
    if end is None or end < 0:
        end = consumer.highwater(tp)
    return bool(state.has_valid_position and end is not None and state.position >= end)
