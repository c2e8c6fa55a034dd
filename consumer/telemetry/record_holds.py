"""Which records of a partition are held back from the commit, by which traces (pure).

A record is held by every open or unfinished trace it fed; a finished trace also pins its
first record until every record in its range is done, so the committed watermark never lands
inside a finished trace (a restart would reassemble its tail alone and judge it again).
"""

from __future__ import annotations

import heapq


class RecordHolds:
    """The offsets held back (not done), in offset order, and the pins of finished traces.

    Held offsets form a doubly linked list: they are only ever held anew at the newest
    offset (the tail), so the list stays in order, and a pin is checked in O(1) against the
    next held offset above it. A pin at ``first`` (its trace's last offset, in a heap per
    first offset) is released once the next held offset above ``first`` is past ``last``.
    That next offset changes only when the one just above ``first`` is released, so each
    release re-checks the pins of its predecessor alone: O(log pins) per offset released.

    Pins cannot deadlock. A pin holds only its trace's first offset ``f`` and waits only on
    the offsets in ``(f, last]``, all strictly above ``f``. What holds one of those is an
    open or unfinished trace (closing is by time and finishing is the caller's: it lets go
    by itself), or a pin at exactly that offset: a finished trace holds nothing but its
    first offset, so one whose first lies below ``f`` holds nothing in the range, and one
    whose first lies inside holds only that first. Each wait therefore points to a strictly
    higher offset: no cycle, and a chain ``f1 < f2 < ...`` ends at a pin that waits on no
    pin. Once every trace is finished, the highest pin waits on nothing and is released,
    then the next below it, and so on: no pin is left behind.
    """

    __slots__ = ("_count", "_next", "_pins", "_prev", "_tail")

    def __init__(self) -> None:
        self._count: dict[int, int] = {}  # held offset -> traces and pins holding it
        self._prev: dict[int, int | None] = {}  # the held offset below, None at the head
        self._next: dict[int, int | None] = {}  # the held offset above, None at the tail
        self._tail: int | None = None
        self._pins: dict[int, list[int]] = {}  # first offset -> heap of pinned traces' last

    def __contains__(self, offset: int) -> bool:
        return offset in self._count

    def hold(self, offset: int) -> None:
        """One more trace holds ``offset``: the newest offset held, or one already held."""
        count = self._count.get(offset)
        if count is not None:
            self._count[offset] = count + 1
            return
        if self._tail is not None and offset < self._tail:
            raise ValueError(f"offset {offset} is before {self._tail}")
        self._count[offset] = 1
        self._prev[offset], self._next[offset] = self._tail, None
        if self._tail is not None:
            self._next[self._tail] = offset
        self._tail = offset

    def finish(self, offsets: list[int]) -> list[int]:
        """A trace fed by ``offsets`` (increasing) finished: pin the first, release the rest;
        return the offsets done now, in order (other traces' pinned first ones among them)."""
        first = offsets[0]
        heapq.heappush(self._pins.setdefault(first, []), offsets[-1])
        done: list[int] = []
        # Step 1: its other offsets, as before; a release may free pins just below it.
        for offset in offsets[1:]:
            self._release(offset, done)
        # Step 2: its own pin, free now unless a record inside its range is still held.
        for _ in range(self._unpin(first)):
            self._release(first, done)
        done.sort()
        return done

    def clear(self) -> None:
        """Hold nothing."""
        self._count.clear()
        self._prev.clear()
        self._next.clear()
        self._pins.clear()
        self._tail = None

    def _release(self, offset: int, done: list[int]) -> None:
        """One hold less on ``offset``; when none is left, it is done, and the pins that
        waited on it last (at the held offset below it) are released in turn."""
        pending = [offset]
        while pending:
            offset = pending.pop()
            left = self._count[offset] - 1
            if left:
                self._count[offset] = left
                continue
            del self._count[offset]
            done.append(offset)
            before, after = self._prev.pop(offset), self._next.pop(offset)
            if after is None:
                self._tail = before
            else:
                self._prev[after] = before
            if before is not None:
                self._next[before] = after
                pending.extend([before] * self._unpin(before))

    def _unpin(self, first: int) -> int:
        """Take off the pins at ``first`` whose range no held offset is in; return how many."""
        pins = self._pins.get(first)
        if not pins:
            return 0
        above = self._next[first]  # the lowest held offset above ``first``
        freed = 0
        while pins and (above is None or pins[0] < above):
            heapq.heappop(pins)
            freed += 1
        if not pins:
            del self._pins[first]
        return freed
