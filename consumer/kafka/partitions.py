"""What the stream's modules say about partitions: the ``Partition`` alias, the rebalance
handler and observer protocols, and the part of a consumer the pipeline drives.

Pure: no aiokafka import, so the pipeline, the replay window and the health probes can name a
partition without pulling in the client library. The one object aiokafka calls on a rebalance
is ``source.subscribe``'s listener; it hands the partitions on as plain sets to a
``RebalanceHandler``.
"""

from __future__ import annotations

from typing import Any, Protocol

Partition = Any  # aiokafka's TopicPartition: hashable, with .topic and .partition


class RebalanceHandler(Protocol):
    """What happens to owned work when partitions move."""

    async def on_partitions_revoked(self, revoked: set[Partition]) -> None: ...

    async def on_partitions_assigned(self, assigned: set[Partition]) -> None: ...


class RebalanceObserver(Protocol):
    """Told once the handler has moved the partitions (health: membership and lag)."""

    def partitions_revoked(self, revoked: set[Partition]) -> None: ...

    def partitions_assigned(self, assigned: set[Partition]) -> None: ...


class Consumer(Protocol):
    """The part of a Kafka consumer the pipeline drives."""

    async def getmany(
        self, *partitions: Partition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[Partition, list[Any]]: ...

    def assignment(self) -> set[Partition]: ...

    def pause(self, *partitions: Partition) -> None: ...

    def seek(self, partition: Partition, offset: int) -> None: ...

    def resume(self, *partitions: Partition) -> None: ...
