"""A consumer group's progress as the broker sees it: when it was handed its partitions, and
its committed offsets over time.

The span benchmarks time a system by these alone, never by its own logs or counters: the
start is the first moment the group is ``Stable`` with members (the partitions are assigned,
so the first fetch is at most one round trip away), the end the first moment its committed
offsets reach the topic's end offsets. Polling costs the broker one small request per poll,
the same for every system measured.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from benchmarks.procs import Child

POLL_S = 0.05


@dataclass
class Progress:
    """What the watch saw: (monotonic time, committed records) at every poll, and the marks."""

    total: int
    stable_at: float | None = None
    done_at: float | None = None
    samples: list[tuple[float, int]] = field(default_factory=list)

    @property
    def first_commit_at(self) -> float | None:
        """The first poll at which anything was committed."""
        return next((at for at, count in self.samples if count > 0), None)

    def rate(self) -> float | None:
        """Records per second from the group's assignment to its last commit."""
        if self.stable_at is None or self.done_at is None:
            return None
        return self.total / max(self.done_at - self.stable_at, 1e-9)

    def steady_rate(self) -> float | None:
        """Records per second between the first commit and the last: what was committed in
        between over that time (leaves out start-up, and a commit that trails its fetch by a
        fixed delay, such as the traces' quiet time)."""
        first = next(((at, n) for at, n in self.samples if n > 0), None)
        if first is None or self.done_at is None or self.done_at <= first[0]:
            return None
        return (self.total - first[1]) / (self.done_at - first[0])


class GroupWatch:
    """Polls one group's state and committed offsets on one topic."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self._admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        self._group = group
        self._topic = topic

    async def __aenter__(self) -> GroupWatch:
        await self._admin.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._admin.close()

    async def committed(self) -> int:
        """The sum of the group's committed offsets on the topic (0 where none)."""
        try:
            offsets = await self._admin.list_consumer_group_offsets(self._group)
        except KafkaError:
            return 0  # the group is still forming
        return sum(max(meta.offset, 0) for tp, meta in offsets.items() if tp.topic == self._topic)

    async def stable(self) -> bool:
        """The group is ``Stable`` with at least one member: its partitions are assigned."""
        try:
            responses = await self._admin.describe_consumer_groups([self._group])
        except KafkaError:
            return False
        for response in responses:
            for group in response.groups:
                # (error_code, group_id, state, protocol_type, protocol, members, ...)
                if group[1] == self._group and group[2] == "Stable" and group[5]:
                    return True
        return False

    async def follow(self, child: Child, total: int, timeout_s: float) -> Progress:
        """Poll until the group has committed ``total`` records (or ``timeout_s``, or the
        child exits); the marks and samples."""
        progress = Progress(total)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            now = time.monotonic()
            if progress.stable_at is None and await self.stable():
                progress.stable_at = now
            count = await self.committed()
            progress.samples.append((now, count))
            if count >= total:
                progress.done_at = now
                break
            if not child.alive():
                raise RuntimeError(f"{child.name} exited early:\n{child.log_tail()}")
            await asyncio.sleep(POLL_S)
        return progress
