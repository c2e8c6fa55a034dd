"""The Kafka clients: their options (security included), their constructors, and the one
function that starts any of them.

``consumer.wiring`` builds every client through these constructors: the group consumer,
replay's group-less reader, the producer and the transactional producers; the worker makes no
admin client. Every client starts through ``start_client``, which applies the failure map
(``errors.py``): a refused login is a configuration error (one line, exit code 2), an
unreachable broker is retried while the worker runs (or reported at once by a command).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import ssl
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.errors import ProducerFenced

from consumer.errors import ConfigError
from consumer.kafka import compat as aiokafka_compat
from consumer.kafka.auth.msk_iam import MskIamTokenProvider
from consumer.kafka.auth.oauth import CachedTokenProvider, ClientCredentialsTokenProvider
from consumer.kafka.copartitioned import METADATA_MAX_AGE_MS, CoPartitionedAssignor
from consumer.kafka.errors import Refuse, Retry, map_kafka_error
from consumer.settings import Settings

log = structlog.get_logger(__name__)

FIRST_RETRY_S = 1.0
MAX_RETRY_S = 30.0
UNREACHABLE_LOG_EVERY_S = 60.0  # a broker still unreachable at start: said this often
# How long the group waits for its members to rejoin a rebalance: set, not left at aiokafka's
# default (the 10 s session timeout), since a member first hands its partitions back
# (``Pipeline.on_partitions_revoked``: in-flight work for at most ``REVOKE_TIMEOUT_S``, then
# a commit, then under exactly once its producers stopped, each bounded). A member slower
# than this is expelled and its last commit refused; the revoke's bound keeps it well under.
REBALANCE_TIMEOUT_MS = 60_000
REVOKE_TIMEOUT_S = 10.0


def client_options(settings: Settings, client_id: str) -> dict[str, Any]:
    """Bootstrap servers, client id and the SASL/TLS settings, for aiokafka's constructors."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.kafka_bootstrap_servers,
        "client_id": client_id,
        "security_protocol": settings.kafka_security_protocol,
    }
    if settings.kafka_security_protocol in ("SSL", "SASL_SSL"):
        options["ssl_context"] = tls_context(
            settings.kafka_ssl_cafile, settings.kafka_ssl_certfile, settings.kafka_ssl_keyfile,
            _secret(settings.kafka_ssl_key_password), settings.kafka_ssl_check_hostname,
        )
    if settings.kafka_security_protocol.startswith("SASL_"):
        options["sasl_mechanism"] = settings.kafka_sasl_mechanism
        if settings.kafka_sasl_mechanism == "OAUTHBEARER":
            options["sasl_oauth_token_provider"] = token_provider(
                settings.kafka_sasl_oauth_provider, settings.kafka_sasl_oauth_token_endpoint_url,
                settings.kafka_sasl_oauth_client_id,
                _secret(settings.kafka_sasl_oauth_client_secret),
                settings.kafka_sasl_oauth_scope, settings.aws_region,
            )
        else:
            options["sasl_plain_username"] = settings.kafka_sasl_username
            options["sasl_plain_password"] = _secret(settings.kafka_sasl_password)
    return options


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None


# Built once per configuration (the cache), not once per client: every client of the process
# shares the TLS context and the token provider, so the worker holds one token, refreshed once.

# path, inode, mtime_ns, size: a file replaced (a new inode) or rewritten in place changes it.
# None: not there (refused).
FileStamp = tuple[str, int, int, int] | None


def tls_context(cafile: str | None, certfile: str | None, keyfile: str | None,
                key_password: str | None, check_hostname: bool) -> ssl.SSLContext:
    """The TLS context: the CA (else the system's), the client certificate chain and key for
    mutual TLS, hostname verification unless turned off. A file that cannot be loaded is a
    ConfigError naming its setting.

    Cached on the files' stamps as well as their paths: certificates rotated in place (Strimzi,
    cert-manager) are read again by the next client made; a client keeps the context it was
    made with, for all its connections (docs/configuration.md: restart after a renewal)."""
    stamps = tuple(_stamp(path) for path in (cafile, certfile, keyfile))
    return _tls_context(cafile, certfile, keyfile, key_password, check_hostname, stamps)


def _stamp(path: str | None) -> FileStamp:
    if path is None:
        return None
    try:
        status = Path(path).stat()  # through the symlink a mounted Secret swaps at rotation
    except OSError:
        return None
    return (path, status.st_ino, status.st_mtime_ns, status.st_size)


@functools.lru_cache(maxsize=8)
def _tls_context(cafile: str | None, certfile: str | None, keyfile: str | None,
                 key_password: str | None, check_hostname: bool,
                 stamps: tuple[FileStamp, ...]) -> ssl.SSLContext:
    del stamps  # only part of the cache's key
    for setting, path in (("KAFKA_SSL_CAFILE", cafile), ("KAFKA_SSL_CERTFILE", certfile),
                          ("KAFKA_SSL_KEYFILE", keyfile)):
        if path is not None and not Path(path).is_file():
            raise ConfigError(f"{setting}: {path} does not exist or is not a file")
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    except ssl.SSLError as exc:
        raise ConfigError(
            f"KAFKA_SSL_CAFILE: {cafile} holds no usable PEM certificate ({exc.reason})"
        ) from None
    if not check_hostname:
        context.check_hostname = False  # the chain is still verified (CERT_REQUIRED)
        log.warning("kafka_ssl_hostname_unchecked", setting="KAFKA_SSL_CHECK_HOSTNAME",
                    detail="the broker's certificate is not checked against its address")
    if certfile is not None:
        _load_client_certificate(context, certfile, keyfile, key_password)
    return context


def _load_client_certificate(context: ssl.SSLContext, certfile: str, keyfile: str | None,
                             key_password: str | None) -> None:
    asked: list[bool] = []

    def password() -> str:
        # Never OpenSSL's default, which would prompt on the terminal for an encrypted key.
        asked.append(True)
        return key_password or ""

    try:
        context.load_cert_chain(certfile, keyfile, password)
    except ssl.SSLError as exc:
        reason = str(exc.reason or "")
        if reason in ("KEY_VALUES_MISMATCH", "NO_CERTIFICATE_ASSIGNED"):
            # NO_CERTIFICATE_ASSIGNED: a key of another type (EC) than the certificate (RSA).
            message = f"KAFKA_SSL_KEYFILE does not match the certificate in {certfile}"
        elif keyfile is None and not _holds_a_private_key(certfile):
            message = "KAFKA_SSL_CERTFILE holds no private key: set KAFKA_SSL_KEYFILE"
        elif asked and key_password is None:
            message = "KAFKA_SSL_KEYFILE is encrypted: set KAFKA_SSL_KEY_PASSWORD"
        elif asked:
            message = "KAFKA_SSL_KEY_PASSWORD does not decrypt KAFKA_SSL_KEYFILE"
        else:
            message = (f"KAFKA_SSL_CERTFILE / KAFKA_SSL_KEYFILE: cannot load the client "
                       f"certificate and key ({reason or 'not PEM'})")
        raise ConfigError(message) from None


def _holds_a_private_key(path: str) -> bool:
    """Whether a PEM file holds a key (any kind: PKCS#8, RSA, EC, encrypted) after its chain."""
    try:
        return "PRIVATE KEY-----" in Path(path).read_text(encoding="ascii", errors="replace")
    except OSError:
        return True  # unreadable: OpenSSL's own reason says more


@functools.lru_cache(maxsize=8)
def token_provider(kind: str, endpoint_url: str | None, client_id: str | None,
                   client_secret: str | None, scope: str | None,
                   region: str | None) -> CachedTokenProvider:
    """The OAUTHBEARER token provider (settings has checked what each kind needs)."""
    if kind == "aws_msk_iam":
        return MskIamTokenProvider(region or "")
    return ClientCredentialsTokenProvider(endpoint_url or "", client_id or "",
                                          client_secret or "", scope)


def new_producer(
    settings: Settings, client_id: str, transactional_id: str | None = None
) -> AIOKafkaProducer:
    """An idempotent producer (acks=all) for verdicts and dead letters; transactional if asked."""
    return AIOKafkaProducer(
        enable_idempotence=True,
        transactional_id=transactional_id,
        linger_ms=5,
        # aiokafka's 16 kB default holds ~22 verdicts, and one batch per partition is in
        # flight: under load that capped publishing at ~22 verdicts per broker round trip.
        max_batch_size=256 * 1024,
        **client_options(settings, client_id),
    )


def new_consumer(settings: Settings, client_id: str, group_id: str | None,
                 *, copartitioned: bool = False, committed_only: bool = True) -> AIOKafkaConsumer:
    """A consumer with manual commits that reads only committed (transactional) records
    (``committed_only`` False: every record, an open transaction's too);
    ``group_id`` None: outside any group (assign and seek, nothing ever committed);
    ``copartitioned``: a member owns the same partition numbers of every topic it reads."""
    # Preferred, and so chosen once every member offers it; until then (a rolling deploy
    # turning OTLP_LOGS_TOPIC on) the group takes aiokafka's default, which the old members
    # offer, rather than refusing the new ones (``copartitioned.py``).
    strategies = (CoPartitionedAssignor, RoundRobinPartitionAssignor)
    strategy = {"partition_assignment_strategy": strategies,
                "metadata_max_age_ms": METADATA_MAX_AGE_MS} if copartitioned else {}
    return AIOKafkaConsumer(
        **strategy,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed" if committed_only else "read_uncommitted",
        max_poll_interval_ms=300_000,
        rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
        **client_options(settings, client_id),
    )


class Startable(Protocol):
    """A Kafka client that connects on ``start()``."""

    async def start(self) -> None: ...


async def start_client(
    client: Startable, what: str, *, bootstrap: str, stop: asyncio.Event | None = None
) -> bool:
    """Start ``client``; what ``map_kafka_error`` says about a failure decides the rest.

    Refused (credentials, TLS): ``ConfigError``, never retried. Unreachable: with ``stop``
    (the worker), retried with back-off until started (True) or stopped (False), said in one
    line at the first failure and again at most every ``UNREACHABLE_LOG_EVERY_S`` (aiokafka's
    own line per attempt and server is held back); without (a command), ``ConfigError``
    "cannot reach" at once. Anything else propagates.
    """
    delay, attempts = FIRST_RETRY_S, 0
    first_failure = said_at = -math.inf
    while stop is None or not stop.is_set():
        action = await start_once(client)
        if action is None:
            if attempts:
                log.info("kafka_reached", client=what, attempts=attempts + 1,
                         after_s=round(time.monotonic() - first_failure, 1))
            return True
        if stop is None:
            raise ConfigError(
                f"KAFKA_BOOTSTRAP_SERVERS: cannot reach {bootstrap} ({action.reason})"
            )
        attempts += 1
        now = time.monotonic()
        if attempts == 1:
            first_failure = now
        if now - said_at >= UNREACHABLE_LOG_EVERY_S:
            said_at = now
            log.warning("kafka_unreachable", client=what, attempts=attempts,
                        waited_s=round(now - first_failure, 1),
                        detail=f"cannot reach {bootstrap} ({action.reason}): retrying with "
                               f"backoff up to {MAX_RETRY_S:g} s, said again once a minute")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        delay = min(delay * 2, MAX_RETRY_S)
    return False


async def start_once(client: Startable) -> Retry | None:
    """One ``start()``: None once started, ``Retry`` when no broker answered; a refusal
    (credentials, TLS, the OAuth token issuer) is a ``ConfigError``. Every Kafka client
    starts through here."""
    if (provider := aiokafka_compat.oauth_token_provider(client)) is not None:
        # The first token before any connection: a refused or unreachable token endpoint is
        # said as itself, whatever the broker would have said (a cached token costs nothing).
        try:
            await provider.token()
        except Exception as exc:
            action = map_kafka_error(exc)
            if isinstance(action, Refuse):
                raise action.error() from None
            if isinstance(action, Retry):
                return action
            raise
    # aiokafka's start() raises the same KafkaConnectionError("Unable to bootstrap ...") for
    # a refused connection and for a refused login: the cause is only in its log records.
    # They are held back, every one: the caller says it all in one line (a refusal, or that
    # the broker cannot be reached), and aiokafka would log one per server per attempt.
    with aiokafka_compat.connection_failures(hold=lambda error: True) as failures:
        try:
            await client.start()
        except Exception as exc:
            action = map_kafka_error(exc)
            if isinstance(action, Retry):  # a refusal among the reasons it could not connect
                refusals = (map_kafka_error(held.error, held.where) for held in failures.held)
                action = next((r for r in refusals if isinstance(r, Refuse)), action)
            if isinstance(action, Retry) and (first := failures.first()) is not None:
                action = replace(action, cause=f"{first.where}: {first.error}")
            if isinstance(action, Refuse):
                raise action.error() from None
            if isinstance(action, Retry):
                return action
            raise
    aiokafka_compat.release(failures)  # another bootstrap server let us in: keep the line
    return None


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
