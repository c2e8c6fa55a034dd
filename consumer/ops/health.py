"""Health and metrics on ``HEALTH_PORT``: ``/healthz``, ``/readyz`` and ``/metrics``.

A small HTTP/1.1 server on ``asyncio.start_server`` (one request per connection, GET or
HEAD); ``/metrics`` is prometheus_client's exposition of ``consumer.ops.metrics.REGISTRY``.
``HEALTH_PORT=0`` picks a free port; either way the port is logged as ``health_listening``.

Liveness (``/healthz``): 200 while the event loop answers and the fetch loop is not wedged.
The pipeline calls ``getmany`` at least every 200 ms, even with every partition paused, and
stamps ``last_fetch_at``; a stamp older than ``wedged_after_s`` (60 s) means the loop is
stuck, unless the worker is draining or Kafka is known to be unreachable (a commit then
waits for the broker, and a restart would not bring the broker back).

Readiness (``/readyz``): 200 only when the consumer has started, the worker is not draining,
the broker answered a check recently, the consumer has joined its group (its assignment
may be empty: a surplus replica is still a healthy member and must not stall a rollout), and
every owned partition could be started (exactly once: its transactional producer).

How Kafka reachability is known: aiokafka exposes no public connection state, and while the
broker is away it keeps retrying inside ``getmany`` (and logging) instead of raising. So the
watch asks the broker itself every ``check_interval_s``, bounded by ``check_timeout_s``:
``end_offsets`` of the assigned partitions (one ListOffsets round trip per leader, whose
answer also feeds ``groundedness_consumer_lag``), or ``topics()`` (a Metadata round trip)
when nothing is assigned. Only public consumer methods are used.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from consumer.errors import ConfigError
from consumer.ops import metrics
from consumer.stream.source import RebalanceHandler

log = structlog.get_logger(__name__)

Partition = Any  # aiokafka's TopicPartition: hashable, with .topic and .partition
_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}
_REQUEST_TIMEOUT_S = 5.0
_MAX_HEADER_LINES = 100
ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - the kubelet probes the pod's IP


@dataclass(frozen=True, slots=True)
class Check:
    """The answer of one probe: healthy or not, and why (one line)."""

    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class HealthState:
    """What the probes decide from; times are ``time.monotonic()`` seconds."""

    last_fetch_at: float | None  # None until the pipeline runs (the consumer has started)
    draining: bool
    joined: bool
    kafka_ok_at: float | None  # the last check the broker answered
    kafka_error: str | None  # why the latest check failed; None when it succeeded
    waiting: dict[str, str] = field(default_factory=dict)  # owned, not started yet: why


def kafka_reachable(state: HealthState, now: float, stale_after_s: float) -> bool:
    """Did the broker answer the latest check, recently enough?"""
    return (
        state.kafka_error is None
        and state.kafka_ok_at is not None
        and now - state.kafka_ok_at <= stale_after_s
    )


def liveness(state: HealthState, now: float, *, wedged_after_s: float,
             stale_after_s: float) -> Check:
    """Alive unless the fetch loop has stopped ticking for a reason Kafka does not explain."""
    if state.last_fetch_at is None:
        return Check(True, "starting")
    if state.draining:
        return Check(True, "draining")
    idle_s = now - state.last_fetch_at
    if idle_s <= wedged_after_s:
        return Check(True, "ok")
    if not kafka_reachable(state, now, stale_after_s):
        return Check(True, f"fetch loop waiting {idle_s:.0f} s for an unreachable Kafka")
    return Check(False, f"fetch loop stuck: no fetch for {idle_s:.0f} s")


def readiness(state: HealthState, now: float, *, stale_after_s: float) -> Check:
    """Ready once started, joined and talking to the broker; never while draining."""
    if state.draining:
        return Check(False, "draining")
    if state.last_fetch_at is None:
        return Check(False, "starting: connecting to Kafka")
    if state.kafka_ok_at is None and state.kafka_error is None:
        return Check(False, "starting: first broker check pending")
    if not kafka_reachable(state, now, stale_after_s):
        return Check(False, f"kafka unreachable: {state.kafka_error or 'no recent answer'}")
    if not state.joined:
        return Check(False, "joining the consumer group")
    if state.waiting:
        partition, why = min(state.waiting.items())
        return Check(False, f"{len(state.waiting)} partition(s) not started, {partition}: {why}")
    return Check(True, "ready")


class Probes(Protocol):
    """What the HTTP server asks."""

    def liveness(self) -> Check: ...

    def readiness(self) -> Check: ...


class HealthServer:
    """Serves ``/healthz``, ``/readyz`` and ``/metrics``."""

    def __init__(self, probes: Probes, registry: CollectorRegistry = metrics.REGISTRY) -> None:
        self._probes = probes
        self._registry = registry
        self._server: asyncio.Server | None = None

    async def start(self, port: int, host: str = ALL_INTERFACES) -> int:
        """Listen (``port`` 0: any free port) and return the port; ConfigError if taken."""
        try:
            self._server = await asyncio.start_server(self._serve, host, port)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(f"HEALTH_PORT: port {port} is already in use") from None
            raise ConfigError(f"HEALTH_PORT: cannot listen on {host}:{port}: {exc}") from None
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening (idempotent)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(_read_head(reader), _REQUEST_TIMEOUT_S)
            if head is not None:
                method, path, headers = head
                status, content_type, body = self._respond(method, path, headers)
                writer.write(
                    f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1")
                )
                if method != "HEAD":
                    writer.write(body)
                await writer.drain()
        except (TimeoutError, ConnectionError, ValueError, asyncio.IncompleteReadError):
            pass  # a client that is slow, gone or not speaking HTTP gets nothing
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _respond(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
        text = "text/plain; charset=utf-8"
        route = path.split("?", 1)[0]
        if route not in ("/healthz", "/readyz", "/metrics"):
            return 404, text, b"not found\n"
        if method not in ("GET", "HEAD"):
            return 405, text, b"method not allowed\n"
        if route == "/metrics":
            encoder, content_type = choose_encoder(headers.get("accept", ""))
            return 200, content_type, encoder(self._registry)
        check = self._probes.liveness() if route == "/healthz" else self._probes.readiness()
        return (200 if check.ok else 503), text, f"{check.detail}\n".encode()


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]] | None:
    request_line = (await reader.readline()).decode("latin-1").strip()
    if not request_line:
        return None
    method, path, *_ = request_line.split(" ")
    headers: dict[str, str] = {}
    for _ in range(_MAX_HEADER_LINES):
        line = (await reader.readline()).decode("latin-1").strip()
        if not line:
            break
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return method.upper(), path, headers


class WatchedConsumer(Protocol):
    """The public consumer methods the watch uses."""

    def assignment(self) -> set[Partition]: ...

    async def end_offsets(self, partitions: list[Partition]) -> dict[Partition, int]: ...

    async def position(self, partition: Partition) -> int: ...

    async def topics(self) -> set[str]: ...


class Waiting(Protocol):
    """Owned partitions that cannot be worked on yet (exactly once: their producer)."""

    def waiting(self) -> dict[Partition, str]: ...


class Heartbeat(Protocol):
    """The pipeline's fetch stamp (``time.monotonic()``; None before its first fetch)."""

    last_fetch_at: float | None


class WorkerHealth:
    """One worker's probes, the Kafka watch that feeds them (and the lag), and the server."""

    def __init__(
        self,
        consumer: WatchedConsumer,
        pipeline: Heartbeat,
        stop: asyncio.Event,
        *,
        check_interval_s: float = 5.0,
        check_timeout_s: float = 5.0,
        wedged_after_s: float = 60.0,
        waiting: Waiting | None = None,
    ) -> None:
        self._consumer = consumer
        self._waiting = waiting
        self._pipeline = pipeline
        self._stop = stop
        self._check_interval_s = check_interval_s
        self._check_timeout_s = check_timeout_s
        self._wedged_after_s = wedged_after_s
        # A check runs at least every interval + timeout; allow one late answer.
        self._stale_after_s = 2 * (check_interval_s + check_timeout_s)
        self._joined = False
        self._kafka_ok_at: float | None = None
        self._kafka_error: str | None = None
        self._lag_labels: set[tuple[str, str]] = set()
        self._server = HealthServer(self)
        self._watch: asyncio.Task[None] | None = None

    def state(self) -> HealthState:
        """A snapshot for the probes."""
        return HealthState(
            last_fetch_at=self._pipeline.last_fetch_at,
            draining=self._stop.is_set(),
            joined=self._joined or bool(self._consumer.assignment()),
            kafka_ok_at=self._kafka_ok_at,
            kafka_error=self._kafka_error,
            waiting=self._waiting_partitions(),
        )

    def _waiting_partitions(self) -> dict[str, str]:
        waiting = self._waiting.waiting() if self._waiting is not None else {}
        return {str(tp): why for tp, why in waiting.items()}

    def liveness(self) -> Check:
        """``/healthz``."""
        return liveness(self.state(), time.monotonic(), wedged_after_s=self._wedged_after_s,
                        stale_after_s=self._stale_after_s)

    def readiness(self) -> Check:
        """``/readyz``."""
        return readiness(self.state(), time.monotonic(), stale_after_s=self._stale_after_s)

    def track(self, handler: RebalanceHandler) -> RebalanceHandler:
        """Wrap the rebalance handler: a completed join, even with no partition, is membership."""
        return _Membership(handler, self)

    async def start(self, port: int) -> int:
        """Serve HTTP and start the Kafka watch; the port (ConfigError if it is taken)."""
        bound = await self._server.start(port)
        log.info("health_listening", port=bound, paths=["/healthz", "/readyz", "/metrics"])
        self._watch = asyncio.create_task(self._watch_kafka(), name="health-watch")
        return bound

    async def close(self) -> None:
        """Stop the watch (before the consumer stops) and the server."""
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
            self._watch = None
        await self._server.close()

    # -- the Kafka watch ---------------------------------------------------------------------

    async def _watch_kafka(self) -> None:
        while True:
            started = self._pipeline.last_fetch_at is not None  # the consumer has started
            if started:
                await self.check_kafka()
            await asyncio.sleep(self._check_interval_s if started else 0.2)

    async def check_kafka(self) -> None:
        """One round trip to the broker; on success, refresh the lag of owned partitions."""
        assigned = self._consumer.assignment()
        try:
            if assigned:
                ends = await asyncio.wait_for(
                    self._consumer.end_offsets(list(assigned)), self._check_timeout_s
                )
            else:
                ends = {}
                await asyncio.wait_for(self._consumer.topics(), self._check_timeout_s)
        except Exception as exc:  # a timeout or any KafkaError: the broker did not answer
            self._kafka_failed(exc)
            return
        if self._kafka_error is not None:
            log.info("kafka_reachable")
        self._kafka_ok_at, self._kafka_error = time.monotonic(), None
        await self._update_lag(ends)

    def _kafka_failed(self, exc: BaseException) -> None:
        detail = str(exc) or f"no answer within {self._check_timeout_s:g} s"
        error = f"{type(exc).__name__}: {detail}"[:300]
        if self._kafka_error is None:  # once per outage: aiokafka itself logs every retry
            log.warning("kafka_unreachable", client="consumer", check="health", error=error)
        self._kafka_error = error

    async def _update_lag(self, ends: dict[Partition, int]) -> None:
        for tp, end in ends.items():
            position = await self._position(tp)
            if position is None:
                continue
            labels = (tp.topic, str(tp.partition))
            metrics.CONSUMER_LAG.labels(*labels).set(max(0, end - position))
            self._lag_labels.add(labels)
        owned = {(tp.topic, str(tp.partition)) for tp in self._consumer.assignment()}
        self.forget_lag(self._lag_labels - owned)

    async def _position(self, tp: Partition) -> int | None:
        try:
            return await asyncio.wait_for(self._consumer.position(tp), 1.0)
        except Exception:  # no position yet (just assigned) or revoked meanwhile
            return None

    def forget_lag(self, labels: Collection[tuple[str, str]]) -> None:
        """Drop the lag series of partitions this worker no longer owns."""
        for label in list(labels):
            with contextlib.suppress(KeyError):
                metrics.CONSUMER_LAG.remove(*label)
            self._lag_labels.discard(label)

    def mark_joined(self) -> None:
        """The consumer completed a group join (called by the rebalance wrapper)."""
        self._joined = True


class _Membership:
    """Passes rebalances on, noting joins and dropping the lag of revoked partitions."""

    def __init__(self, handler: RebalanceHandler, health: WorkerHealth) -> None:
        self._handler = handler
        self._health = health

    async def on_partitions_revoked(self, revoked: set[Partition]) -> None:
        await self._handler.on_partitions_revoked(revoked)
        self._health.forget_lag([(tp.topic, str(tp.partition)) for tp in revoked])

    async def on_partitions_assigned(self, assigned: set[Partition]) -> None:
        await self._handler.on_partitions_assigned(assigned)
        self._health.mark_joined()
