"""One worker's health on ``HEALTH_PORT``: the probes, the broker watch that feeds them, the
server, and what rebalances tell it (group membership, partitions whose lag to drop).

The decisions are pure (``consumer.health.probes``), the broker's answers come from
``consumer.health.broker_watch``, and ``consumer.health.server`` serves ``/healthz``,
``/readyz`` and ``/metrics``. ``HEALTH_PORT=0`` picks a free port; either way the port is
logged as ``health_listening``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

import structlog

from consumer.health.broker_watch import BrokerWatch, Heartbeat, WatchedConsumer
from consumer.health.probes import Check, HealthState, liveness, readiness
from consumer.health.server import PATHS, HealthServer
from consumer.kafka.partitions import Partition

log = structlog.get_logger(__name__)


class Waiting(Protocol):
    """Owned partitions that cannot be worked on yet (exactly once: their producer)."""

    def waiting(self) -> dict[Partition, str]: ...


class WorkerHealth:
    """One worker's probes, the broker watch that feeds them (and the lag), and the server."""

    def __init__(
        self,
        consumer: WatchedConsumer,
        pipeline: Heartbeat,
        stop: asyncio.Event,
        *,
        waiting: Waiting | None = None,
        check_interval_s: float = 5.0,
        check_timeout_s: float = 5.0,
        wedged_after_s: float = 60.0,
    ) -> None:
        self.watch = BrokerWatch(consumer, pipeline, check_interval_s=check_interval_s,
                                 check_timeout_s=check_timeout_s)
        self._consumer, self._pipeline, self._stop = consumer, pipeline, stop
        self._waiting, self._wedged_after_s = waiting, wedged_after_s
        self._joined = False
        self._server = HealthServer(self)
        self._watch_task: asyncio.Task[None] | None = None

    def state(self) -> HealthState:
        """A snapshot for the probes."""
        waiting = self._waiting.waiting() if self._waiting is not None else {}
        return HealthState(
            last_fetch_at=self._pipeline.last_fetch_at,
            draining=self._stop.is_set(),
            joined=self._joined or bool(self._consumer.assignment()),
            kafka_ok_at=self.watch.kafka_ok_at,
            kafka_error=self.watch.kafka_error,
            waiting={str(tp): why for tp, why in waiting.items()},
        )

    def liveness(self) -> Check:
        """``/healthz``."""
        return liveness(self.state(), time.monotonic(), wedged_after_s=self._wedged_after_s,
                        stale_after_s=self.watch.stale_after_s)

    def readiness(self) -> Check:
        """``/readyz``."""
        return readiness(self.state(), time.monotonic(), stale_after_s=self.watch.stale_after_s)

    def partitions_assigned(self, assigned: set[Partition]) -> None:
        """A completed join, even with no partition, is membership."""
        self._joined = True

    def partitions_revoked(self, revoked: set[Partition]) -> None:
        """Revoked partitions' lag series go (another member reports them now)."""
        self.watch.forget_lag([(tp.topic, str(tp.partition)) for tp in revoked])

    async def start(self, port: int) -> int:
        """Serve HTTP and start the broker watch; the port (ConfigError if it is taken)."""
        bound = await self._server.start(port)
        log.info("health_listening", port=bound, paths=list(PATHS))
        self._watch_task = asyncio.create_task(self.watch.run(), name="health-watch")
        return bound

    async def close(self) -> None:
        """Stop the watch (before the consumer stops) and the server (idempotent)."""
        if self._watch_task is not None:
            self._watch_task.cancel()
            await asyncio.gather(self._watch_task, return_exceptions=True)
            self._watch_task = None
        await self._server.close()

