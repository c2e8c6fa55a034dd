"""Out-of-order completions -> what each partition may commit: a watermark and its progress.

Records of one partition are fetched in offset order but finish in any order. The offset to
commit is the lowest one not yet done (or one past the last fetched when all are done): every
record below it has its outcome acknowledged, so committing it loses nothing. The watermark
never moves backwards. What is done above it goes with it, in the commit's metadata
(``progress.py``): a restart or a new owner re-reads only the records that were not done.

A partition taken over with progress (``inherit``) skips the records its previous owner
finished (the caller asks ``inherited``); until it has read past what that owner had read,
its own progress carries the rest of the inherited one, so a third owner skips them too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Iterator
from typing import Generic, Literal, TypeVar

from consumer.pipeline.progress import Progress

Key = TypeVar("Key", bound=Hashable)
# A fetched record: never read before, read again (its previous owner had not finished it),
# or finished by its previous owner (done at once, skipped).
Taken = Literal["new", "reread", "skipped_done"]


class PartitionOffsets:
    """The offsets of one partition between fetch and commit."""

    __slots__ = ("_changes", "_committed", "_committed_changes", "_done", "_inherited",
                 "_last_added", "_open", "_pending", "_uncommitted")

    def __init__(self, inherited: Progress | None = None) -> None:
        self._pending: deque[int] = deque()  # fetched, not yet passed by the watermark
        self._open: set[int] = set()  # fetched and not done
        self._done: set[int] = set()  # done, but some lower offset is still open
        self._uncommitted: deque[int] = deque()  # fetched and not yet below a commit
        self._last_added: int | None = None
        self._committed: int | None = None
        self._changes = 0  # records done so far: the progress changed since a commit
        self._committed_changes = 0
        # The previous owner's progress, while this one has not read past it.
        self._inherited = inherited if inherited is not None and _tells_more(inherited) else None

    @property
    def inherited(self) -> Progress | None:
        """The previous owner's progress, while records it finished may still come."""
        return self._inherited

    def add(self, offset: int) -> None:
        """Track a fetched record; offsets must increase."""
        if self._last_added is not None and offset <= self._last_added:
            raise ValueError(f"offset {offset} is not after {self._last_added}")
        self._pending.append(offset)
        self._open.add(offset)
        self._uncommitted.append(offset)
        self._last_added = offset
        if self._inherited is not None and offset + 1 >= self._inherited.fetched_to:
            self._inherited = None  # read past it: this owner's own state says it all

    def take(self, offset: int) -> Taken:
        """Track a fetched record (``add``); done at once when its previous owner finished
        it, as the commit's progress says (the caller then skips it)."""
        inherited = self._inherited
        self.add(offset)
        if inherited is None or offset >= inherited.fetched_to:
            return "new"
        if inherited.is_done(offset):
            self.done(offset)
            return "skipped_done"
        return "reread"

    def done(self, offset: int) -> None:
        """Mark a record's outcome as acknowledged."""
        if offset not in self._open:
            if self._last_added is None or offset > self._last_added:
                raise ValueError(f"offset {offset} was never added")
            return  # already done: a duplicate completion changes nothing
        self._open.discard(offset)
        self._done.add(offset)
        self._changes += 1
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

    def progress(self, closed: Iterable[bytes] = ()) -> Progress | None:
        """The watermark and what is done above it (``closed``: the finished traces with
        spans in records not done, span input); None before any record was read."""
        mark = self.watermark()
        if mark is None or self._last_added is None:
            return None
        fetched_to = self._last_added + 1
        not_done: Iterable[int] = self._open
        inherited = self._inherited
        if inherited is not None:  # what its previous owner finished beyond this one's reading
            fetched_to = inherited.fetched_to
            not_done = [*self._open, *(offset for start, end in inherited.unfinished
                                       for offset in range(max(start, self._last_added + 1),
                                                           end))]
            closed = [*closed, *inherited.closed]
        return Progress.of(mark, fetched_to, not_done, closed)

    def changed(self) -> bool:
        """Did the progress change since the last commit (or was nothing committed yet)?"""
        mark = self.watermark()
        if mark is None:
            return False
        return (self._committed is None or mark > self._committed
                or self._changes != self._committed_changes)

    def committed(self, offset: int, changes: int | None = None) -> None:
        """Record a successful commit at ``offset`` of the progress as of ``changes``
        (``snapshot``); going backwards is ignored."""
        if changes is not None:
            self._committed_changes = max(self._committed_changes, changes)
        if self._committed is None or offset > self._committed:
            self._committed = offset
            while self._uncommitted and self._uncommitted[0] < offset:
                self._uncommitted.popleft()

    @property
    def snapshot(self) -> int:
        """How many records were done so far (given back to ``committed``)."""
        return self._changes


def _tells_more(progress: Progress) -> bool:
    """Does the progress say more than its watermark: records to skip, or traces closed?"""
    return bool(progress.closed) or progress.reread < progress.fetched_to - progress.watermark


class OffsetTracker(Generic[Key]):
    """Watermarks for every owned partition."""

    def __init__(self) -> None:
        self._partitions: dict[Key, PartitionOffsets] = {}

    def partition(self, key: Key, inherited: Progress | None = None) -> PartitionOffsets:
        """The partition's offsets, created on first use (with its previous owner's
        progress)."""
        offsets = self._partitions.get(key)
        if offsets is None:
            offsets = self._partitions[key] = PartitionOffsets(inherited)
        return offsets

    def current(self, key: Key) -> PartitionOffsets | None:
        """The partition's offsets if it is still tracked (i.e. still assigned)."""
        return self._partitions.get(key)

    def drop(self, key: Key) -> None:
        """Forget a partition (revoked); late completions for it are then ignored."""
        self._partitions.pop(key, None)

    def changed(self) -> list[Key]:
        """The partitions whose progress changed since their last commit."""
        return [key for key, offsets in self._partitions.items() if offsets.changed()]

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
