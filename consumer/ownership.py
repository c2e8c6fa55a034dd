"""Exactly once: a partition is worked on only once this worker really owns it.

Taking a partition is three steps, in this order; the order is the correctness argument:

1. Start the partition's transactional producer. Initialising its transactional id aborts
   the previous owner's open transaction and fences it: from then on nothing commits for
   the partition except through this producer.
2. Read the committed offset again and seek to it. aiokafka read it when the partition was
   assigned, before step 1, so a transaction the previous owner committed in between would
   leave this worker reading from a stale offset and publishing again what that
   transaction published. (KIP-447 clients do the same; aiokafka has no KIP-447.)
3. Hand the partition to the pipeline, which from then on dispatches its records.

Until step 3 the partition is paused and ``/readyz`` says why. A step that fails (a broker
restarting, the transaction coordinator moving) is retried with backoff for as long as the
partition stays assigned. A producer lost later (fenced, or timed out by the broker) is
replaced the same way, once the pipeline has dropped the partition's in-flight work, so the
partition starts again from its committed offset.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import structlog
from aiokafka import TopicPartition

from consumer.pipeline import Pipeline
from consumer.transactional import TransactionalSink

log = structlog.get_logger(__name__)


class OwnedConsumer(Protocol):
    """The consumer methods that taking a partition needs."""

    def assignment(self) -> set[TopicPartition]: ...

    async def committed(self, partition: TopicPartition) -> int | None: ...

    def seek(self, partition: TopicPartition, offset: int) -> None: ...

    def pause(self, *partitions: TopicPartition) -> None: ...


class PartitionOwnership:
    """The rebalance handler for ``DELIVERY=exactly_once`` (see the module docstring)."""

    def __init__(
        self,
        consumer: OwnedConsumer,
        sink: TransactionalSink,
        pipeline: Pipeline,
        *,
        first_retry_s: float = 1.0,
        max_retry_s: float = 30.0,
    ) -> None:
        self._consumer = consumer
        self._sink = sink
        self._pipeline = pipeline
        self._first_retry_s = first_retry_s
        self._max_retry_s = max_retry_s
        self._retries: dict[TopicPartition, asyncio.Task[None]] = {}
        self._failures: dict[TopicPartition, str] = {}  # why each waiting partition waits
        sink.on_lost = self._lost

    def waiting(self) -> dict[TopicPartition, str]:
        """The assigned partitions that could not be started yet, and why."""
        return dict(self._failures)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Take each partition now; one that cannot start yet waits, paused, and retries."""
        for tp in sorted(assigned):
            if not await self._take(tp):
                self._retry(tp)

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Stop any retry, let the pipeline drain and commit, then drop the producers."""
        await _cancel([task for tp in revoked if (task := self._retries.pop(tp, None))])
        for tp in revoked:
            self._failures.pop(tp, None)
        await self._pipeline.on_partitions_revoked(revoked)  # drains and commits first
        await self._sink.partitions_revoked(revoked)

    async def close(self) -> None:
        """Stop retrying (shutdown)."""
        await _cancel(list(self._retries.values()))

    async def _take(self, tp: TopicPartition) -> bool:
        try:
            await self._sink.start_partition(tp)  # Step 1: fence the previous owner
            committed = await self._consumer.committed(tp)  # Step 2: read after fencing
        except Exception as exc:  # the broker or its coordinator did not answer: retry
            if tp in self._consumer.assignment():  # pausing a partition no longer owned raises
                self._consumer.pause(tp)
            error = f"{type(exc).__name__}: {exc}"[:300]
            if tp not in self._failures:
                log.warning("partition_start_failed", partition=str(tp), error=error,
                            detail="the partition waits, paused, and /readyz is 503")
            self._failures[tp] = error
            return False
        if committed is not None:
            self._consumer.seek(tp, committed)
        if self._failures.pop(tp, None) is not None:
            log.info("partition_started", partition=str(tp), offset=committed)
        self._pipeline.on_partitions_assigned({tp})  # Step 3: dispatch from here on
        return True

    def _retry(self, tp: TopicPartition) -> None:
        if tp not in self._retries:
            self._retries[tp] = asyncio.create_task(
                self._keep_taking(tp, self._first_retry_s), name=f"take-{tp}"
            )

    async def _keep_taking(self, tp: TopicPartition, delay: float) -> None:
        try:
            while tp in self._consumer.assignment():
                await asyncio.sleep(delay)
                if await self._take(tp):
                    return
                delay = min(max(2 * delay, self._first_retry_s), self._max_retry_s)
        finally:
            if self._retries.get(tp) is asyncio.current_task():
                del self._retries[tp]

    def _lost(self, tp: TopicPartition) -> None:
        """The sink dropped the partition's producer: take the partition again from scratch."""
        self._failures[tp] = "transactional producer lost (fenced or timed out); restarting"
        self._retries[tp] = asyncio.create_task(self._restart(tp), name=f"restart-{tp}")

    async def _restart(self, tp: TopicPartition) -> None:
        await self._pipeline.forget_partition(tp)  # no in-flight work may outlive its producer
        await self._keep_taking(tp, 0.0)


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
