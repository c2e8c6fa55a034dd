"""A consumer and a pipeline that answer like the worker's, for the health tests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TP:
    topic: str
    partition: int


@dataclass
class FakeConsumer:
    """Answers like aiokafka's consumer; ``broker`` is "up", "down" (raises) or "hang"."""

    assigned: set[TP] = field(default_factory=set)
    ends: dict[TP, int] = field(default_factory=dict)
    positions: dict[TP, int] = field(default_factory=dict)
    broker: str = "up"

    def assignment(self) -> set[TP]:
        return set(self.assigned)

    async def _answer(self) -> None:
        if self.broker == "down":
            raise RuntimeError("Unable to get cluster metadata over all known brokers")
        if self.broker == "hang":
            await asyncio.sleep(3600)

    async def end_offsets(self, partitions: list[TP]) -> dict[TP, int]:
        await self._answer()
        return {tp: self.ends[tp] for tp in partitions}

    async def position(self, partition: TP) -> int:
        if partition not in self.positions:
            await asyncio.sleep(3600)  # aiokafka waits for a position being reset
        return self.positions[partition]

    async def topics(self) -> set[str]:
        await self._answer()
        return {"traces"}


@dataclass
class FakePipeline:
    last_fetch_at: float | None = None
