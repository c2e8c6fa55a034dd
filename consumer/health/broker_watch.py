"""The broker watch: is Kafka answering this worker, and how far behind is each partition?

aiokafka exposes no public connection state, and while the broker is away it keeps retrying
inside ``getmany`` (and logging) instead of raising. So the watch asks the broker itself
every ``check_interval_s``, bounded by ``check_timeout_s``: ``end_offsets`` of the assigned
partitions (one ListOffsets round trip per leader, whose answer also feeds
``groundedness_consumer_lag``), or ``topics()`` (a Metadata round trip) when nothing is
assigned. Only public consumer methods are used.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Collection
from typing import Protocol

import structlog

from consumer.kafka.partitions import Partition
from consumer.ops import metrics

log = structlog.get_logger(__name__)
_POSITION_TIMEOUT_S = 1.0
_BEFORE_START_POLL_S = 0.2


class WatchedConsumer(Protocol):
    """The public consumer methods the watch uses."""

    def assignment(self) -> set[Partition]: ...

    async def end_offsets(self, partitions: list[Partition]) -> dict[Partition, int]: ...

    async def position(self, partition: Partition) -> int: ...

    async def topics(self) -> set[str]: ...


class Heartbeat(Protocol):
    """The pipeline's fetch stamp (``time.monotonic()``; None before its first fetch)."""

    last_fetch_at: float | None


class BrokerWatch:
    """Checks the broker on a cadence; keeps the outcome and the lag gauges of owned partitions."""

    def __init__(self, consumer: WatchedConsumer, pipeline: Heartbeat, *,
                 check_interval_s: float = 5.0, check_timeout_s: float = 5.0) -> None:
        self._consumer = consumer
        self._pipeline = pipeline
        self._check_interval_s = check_interval_s
        self._check_timeout_s = check_timeout_s
        self.kafka_ok_at: float | None = None  # time.monotonic() of the last answered check
        self.kafka_error: str | None = None  # why the latest check failed; None if it did not
        self._lag_labels: set[tuple[str, str]] = set()

    @property
    def stale_after_s(self) -> float:
        """How old an answer may be and still count as the broker answering."""
        # A check runs at least every interval + timeout; allow one late answer.
        return 2 * (self._check_interval_s + self._check_timeout_s)

    async def run(self) -> None:
        """Check every ``check_interval_s`` once the consumer has started, until cancelled."""
        while True:
            started = self._pipeline.last_fetch_at is not None
            if started:
                await self.check_kafka()
            await asyncio.sleep(self._check_interval_s if started else _BEFORE_START_POLL_S)

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
            self._failed(exc)
            return
        if self.kafka_error is not None:
            log.info("kafka_reachable")
        self.kafka_ok_at, self.kafka_error = time.monotonic(), None
        await self._update_lag(ends)

    def _failed(self, exc: BaseException) -> None:
        detail = str(exc) or f"no answer within {self._check_timeout_s:g} s"
        error = f"{type(exc).__name__}: {detail}"[:300]
        if self.kafka_error is None:  # once per outage: aiokafka itself logs every retry
            log.warning("kafka_unreachable", client="consumer", check="health", error=error)
        self.kafka_error = error

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
            return await asyncio.wait_for(self._consumer.position(tp), _POSITION_TIMEOUT_S)
        except Exception:  # no position yet (just assigned) or revoked meanwhile
            return None

    def forget_lag(self, labels: Collection[tuple[str, str]]) -> None:
        """Drop the lag series of partitions this worker no longer owns."""
        for label in list(labels):
            with contextlib.suppress(KeyError):
                metrics.CONSUMER_LAG.remove(*label)
            self._lag_labels.discard(label)
