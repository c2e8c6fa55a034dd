"""The Kafka consumer: group membership, manual commits, and the rebalance listener."""

from __future__ import annotations

from typing import Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from consumer.settings import Settings
from consumer.stream.kafka import client_options


class RebalanceHandler(Protocol):
    """What happens to owned work when partitions move."""

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, handler: RebalanceHandler) -> None:
        self._handler = handler

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._handler.on_partitions_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._handler.on_partitions_assigned(set(assigned))


def create_consumer(settings: Settings, *, group_id: str | None = None) -> AIOKafkaConsumer:
    """A consumer with manual commits that reads only committed (transactional) records."""
    return AIOKafkaConsumer(
        group_id=group_id if group_id is not None else settings.consumer_group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        max_poll_interval_ms=300_000,
        **client_options(settings, client_id=f"{settings.consumer_group}-consumer"),
    )


def subscribe(consumer: AIOKafkaConsumer, topic: str, handler: RebalanceHandler) -> None:
    """Join the group on ``topic``, routing rebalances to the handler."""
    consumer.subscribe([topic], listener=_Listener(handler))
