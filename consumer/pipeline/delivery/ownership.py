"""Exactly once: a partition is worked on only once this worker really owns it.

Taking a partition is three steps, in this order; the order is the correctness argument:

1. Start the partition's transactional producer. Initialising its transactional id aborts
   the previous owner's open transaction and fences it: from then on nothing commits for
   the partition except through this producer.
2. Read the committed offset again, with its progress (``progress.py``), and seek to it (to
   the beginning when there is none). aiokafka read it when the partition was assigned,
   before step 1, so a transaction the previous owner committed in between would leave this
   worker reading from a stale offset and publishing again what that transaction published.
   (KIP-447 clients do the same; aiokafka has no KIP-447.)
3. Hand the partition and its progress to the pipeline, which from then on dispatches its
   records, skipping those the progress marks done.

Each assigned partition has one task that takes it, outside the rebalance callback (which
must return: heartbeats and ``stop()`` wait for it). Until step 3 the partition is paused
and ``/readyz`` says why; a step that fails or hangs (a broker restarting, the transaction
coordinator moving) is bounded and retried with backoff. A revoke cancels the partition's
task before anything else, so no task outlives its partition. A producer lost later (fenced,
or timed out by the broker) is replaced by a new task, once the pipeline has dropped the
partition's in-flight work, so the partition starts over from its committed offset.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from typing import Protocol

import structlog

from consumer.kafka.types import TopicPartition
from consumer.pipeline.delivery.transactional import TransactionalSink
from consumer.pipeline.pipeline import Pipeline
from consumer.pipeline.progress import Progress

log = structlog.get_logger(__name__)

# Taking a partition (fence, re-read the committed offset) gets this long per attempt, and is
# retried after a delay doubling from the first to the second figure while the broker or its
# transaction coordinator does not answer.
TAKE_TIMEOUT_S = 15.0
TAKE_RETRY_S = (1.0, 30.0)


# The committed offsets of the partitions, with their progress; none for one never committed.
ReadCommitted = Callable[[Collection[TopicPartition]], Awaitable[dict[TopicPartition, Progress]]]


class OwnedConsumer(Protocol):
    """The consumer methods that taking a partition needs."""

    def seek(self, partition: TopicPartition, offset: int) -> None: ...

    async def seek_to_beginning(self, *partitions: TopicPartition) -> bool: ...

    def pause(self, *partitions: TopicPartition) -> None: ...


class PartitionOwnership:
    """The rebalance handler for ``DELIVERY=exactly_once`` (see the module docstring)."""

    def __init__(
        self,
        consumer: OwnedConsumer,
        sink: TransactionalSink,
        pipeline: Pipeline,
        stop: asyncio.Event,
        read_committed: ReadCommitted,
    ) -> None:
        self._consumer = consumer
        self._read_committed = read_committed
        self._sink = sink
        self._pipeline = pipeline
        self._stop = stop
        self._takers: dict[TopicPartition, asyncio.Task[None]] = {}  # one per owned partition
        self._waiting: dict[TopicPartition, str] = {}  # owned, not handed over yet: why
        sink.on_lost = self._lost

    def waiting(self) -> dict[TopicPartition, str]:
        """The owned partitions not handed to the pipeline yet, and why."""
        return dict(self._waiting)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Start taking each partition, paused until it is handed over."""
        for tp in assigned:
            self._consumer.pause(tp)
            self._start_taking(tp, "starting its transactional producer")

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Cancel the takers first, then let the pipeline drain and commit, then drop the
        producers."""
        await _cancel([task for tp in revoked if (task := self._takers.pop(tp, None))])
        for tp in revoked:
            self._waiting.pop(tp, None)
        await self._pipeline.on_partitions_revoked(revoked)  # drains and commits
        await self._sink.partitions_revoked(revoked)

    async def close(self) -> None:
        """Stop taking partitions (shutdown)."""
        await _cancel(list(self._takers.values()))
        self._takers.clear()

    def _start_taking(self, tp: TopicPartition, why: str, *, forget: bool = False) -> None:
        self._waiting[tp] = why
        self._takers[tp] = asyncio.create_task(self._take(tp, forget), name=f"take-{tp}")

    async def _take(self, tp: TopicPartition, forget: bool) -> None:
        if forget:  # no in-flight work may outlive the producer it was meant for
            await self._pipeline.forget_partition(tp)
        delay, failed = 0.0, False
        while True:
            await asyncio.sleep(delay)
            try:
                async with asyncio.timeout(TAKE_TIMEOUT_S):
                    await self._sink.start_partition(tp)  # Step 1: fence the previous owner
                    # Step 2: read after it
                    progress = (await self._read_committed([tp])).get(tp)
                    if progress is None:
                        await self._consumer.seek_to_beginning(tp)
                    else:
                        self._consumer.seek(tp, progress.watermark)
                break
            except Exception as exc:  # the broker or its coordinator did not answer: retry
                delay = min(max(2 * delay, TAKE_RETRY_S[0]), TAKE_RETRY_S[1])
                self._failed(tp, exc, delay, first=not failed)
                failed = True
        self._waiting.pop(tp, None)
        if failed or forget:
            log.info("partition_started", partition=str(tp),
                     offset=None if progress is None else progress.watermark)
        # Step 3: dispatch from here on
        await self._pipeline.on_partitions_assigned(
            {tp}, {} if progress is None else {tp: progress})

    def _failed(self, tp: TopicPartition, exc: Exception, retry_in_s: float, *,
                first: bool) -> None:
        error = f"{type(exc).__name__}: {exc}" if str(exc) else f"no answer ({type(exc).__name__})"
        self._waiting[tp] = f"cannot start its transactional producer: {error[:300]}"
        if first:  # once per partition and attempt to take it; the retries are at debug
            log.warning("partition_start_failed", partition=str(tp), error=error[:300],
                        retry_in_s=retry_in_s, detail="the partition waits, paused; /readyz 503")
        else:
            log.debug("partition_start_retry", partition=str(tp), error=error[:300],
                      retry_in_s=retry_in_s)

    def _lost(self, tp: TopicPartition) -> None:
        """The sink dropped the partition's producer: take the partition again from scratch
        (unless it is no longer ours, or the worker is stopping: then it is judged again by
        whoever takes it next)."""
        if tp in self._takers and not self._stop.is_set():
            self._start_taking(tp, "transactional producer lost (fenced or timed out)",
                               forget=True)


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
