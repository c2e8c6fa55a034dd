"""Out-of-order completions -> the offset each partition may commit (a watermark).

Records of one partition are fetched in offset order but finish in any order. The offset to
commit is the lowest one not yet done (or one past the last fetched when all are done): every
record below it has its outcome acknowledged, so committing it loses nothing, and a restart
re-reads only records that may not have finished. The watermark never moves backwards.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)


class PartitionOffsets:
    """The offsets of one partition between fetch and commit."""

    __slots__ = ("_committed", "_done", "_last_added", "_open", "_pending", "_uncommitted")

    def __init__(self) -> None:
        self._pending: deque[int] = deque()  # fetched, not yet passed by the watermark
        self._open: set[int] = set()  # fetched and not done
        self._done: set[int] = set()  # done, but some lower offset is still open
        self._uncommitted: deque[int] = deque()  # fetched and not yet below a commit
        self._last_added: int | None = None
        self._committed: int | None = None

    def add(self, offset: int) -> None:
        """Track a fetched record; offsets must increase."""
        if self._last_added is not None and offset <= self._last_added:
            raise ValueError(f"offset {offset} is not after {self._last_added}")
        self._pending.append(offset)
        self._open.add(offset)
        self._uncommitted.append(offset)
        self._last_added = offset

    def done(self, offset: int) -> None:
        """Mark a record's outcome as acknowledged."""
        if offset not in self._open:
            if self._last_added is None or offset > self._last_added:
                raise ValueError(f"offset {offset} was never added")
            return  # already done: a duplicate completion changes nothing
        self._open.discard(offset)
        self._done.add(offset)
        while self._pending and self._pending[0] in self._done:
            self._done.discard(self._pending.popleft())

    @property
    def in_flight(self) -> int:
        """Records fetched and not yet done."""
        return len(self._open)

    @property
    def uncommitted(self) -> int:
        """Records fetched and not yet covered by a commit (what a crash would redeliver)."""
        return len(self._uncommitted)

    def watermark(self) -> int | None:
        """The offset to commit: the lowest pending one, or one past the last added."""
        if self._pending:
            return self._pending[0]
        return None if self._last_added is None else self._last_added + 1

    def to_commit(self) -> int | None:
        """The watermark when it moved past the last commit, else None."""
        mark = self.watermark()
        if mark is None or (self._committed is not None and mark <= self._committed):
            return None
        return mark

    def committed(self, offset: int) -> None:
        """Record a successful commit; going backwards is ignored."""
        if self._committed is None or offset > self._committed:
            self._committed = offset
            while self._uncommitted and self._uncommitted[0] < offset:
                self._uncommitted.popleft()


class OffsetTracker(Generic[Key]):
    """Watermarks for every owned partition."""

    def __init__(self) -> None:
        self._partitions: dict[Key, PartitionOffsets] = {}

    def partition(self, key: Key) -> PartitionOffsets:
        """The partition's offsets, created on first use."""
        offsets = self._partitions.get(key)
        if offsets is None:
            offsets = self._partitions[key] = PartitionOffsets()
        return offsets

    def current(self, key: Key) -> PartitionOffsets | None:
        """The partition's offsets if it is still tracked (i.e. still assigned)."""
        return self._partitions.get(key)

    def drop(self, key: Key) -> None:
        """Forget a partition (revoked); late completions for it are then ignored."""
        self._partitions.pop(key, None)

    def to_commit(self) -> dict[Key, int]:
        """Every partition whose watermark moved since its last commit."""
        result = {}
        for key, offsets in self._partitions.items():
            mark = offsets.to_commit()
            if mark is not None:
                result[key] = mark
        return result

    def committed(self, offsets: dict[Key, int]) -> None:
        """Record a successful commit of these offsets."""
        for key, offset in offsets.items():
            if key in self._partitions:
                self._partitions[key].committed(offset)

    @property
    def in_flight(self) -> int:
        """Records fetched and not yet done, over all partitions."""
        return sum(offsets.in_flight for offsets in self._partitions.values())

    @property
    def uncommitted(self) -> int:
        """Records fetched and not yet covered by a commit, over all partitions."""
        return sum(offsets.uncommitted for offsets in self._partitions.values())

    def __iter__(self) -> Iterator[Key]:
        return iter(list(self._partitions))
