"""Joining the consumer group: the one listener aiokafka calls on a rebalance.

The listener hands the partitions to the handler (``PartitionOwnership`` exactly once, the
``Pipeline`` itself at least once), then tells the observers (health: a completed join is
membership, a revoked partition's lag series goes) once the handler is done.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

from consumer.kafka.partitions import Partition, RebalanceHandler, RebalanceObserver


class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka's listener: the handler moves the partitions, then the observers hear of it."""

    def __init__(
        self, handler: RebalanceHandler, observers: Sequence[RebalanceObserver] = ()
    ) -> None:
        self._handler = handler
        self._observers = tuple(observers)

    async def on_partitions_revoked(self, revoked: set[Partition]) -> None:
        """Hand the partitions back (their work drains and commits), then tell observers."""
        partitions = set(revoked)
        await self._handler.on_partitions_revoked(partitions)
        for observer in self._observers:
            observer.partitions_revoked(partitions)

    async def on_partitions_assigned(self, assigned: set[Partition]) -> None:
        """Take the partitions (exactly once: in the background), then tell observers."""
        partitions = set(assigned)
        await self._handler.on_partitions_assigned(partitions)
        for observer in self._observers:
            observer.partitions_assigned(partitions)


def subscribe(
    consumer: AIOKafkaConsumer,
    topics: Sequence[str],
    handler: RebalanceHandler,
    observers: Sequence[RebalanceObserver] = (),
) -> None:
    """Join the group on ``topics``, routing rebalances to the handler and then the
    observers. (Two topics are co-partitioned: the consumer's assignor is
    ``copartitioned.CoPartitionedAssignor``, see ``clients.new_consumer``.)"""
    consumer.subscribe(list(topics), listener=Listener(handler, observers))
