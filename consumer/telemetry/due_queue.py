"""Trace ids by a time, earliest first, whatever order the times come in (pure).

An assembly closes its traces by two times: the first span's (max wait) and the last
activity's (quiet). With one topic those come in order, but the records of two topics
(``OTLP_LOGS_TOPIC``) are read each at its own pace, so a record of the topic behind touches
a trace with an earlier time than one the topic ahead touched before: a queue kept in order
of arrival would leave a due trace behind one that is not. This is a heap instead. Setting an
id's time again, or removing it, leaves its old entry in place, skipped when it comes to the
top (and the heap is rebuilt once such leftovers outnumber the ids).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from itertools import count

_REBUILD_OVER = 1_024  # leftovers tolerated beyond four per id before the heap is rebuilt


class DueQueue:
    """``set`` an id's time, ``first`` the earliest, ``discard`` one."""

    __slots__ = ("_at", "_heap", "_order")

    def __init__(self) -> None:
        self._at: dict[str, float] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._order = count()  # ties: the id set first comes first

    def __len__(self) -> int:
        return len(self._at)

    def __contains__(self, key: str) -> bool:
        return key in self._at

    def __iter__(self) -> Iterator[str]:
        return iter(self._at)

    def set(self, key: str, at: float) -> None:
        """``key``'s time is now ``at`` (earlier or later than before)."""
        if self._at.get(key) == at:
            return
        self._at[key] = at
        heapq.heappush(self._heap, (at, next(self._order), key))
        if len(self._heap) > 4 * len(self._at) + _REBUILD_OVER:
            self._heap = [(at, next(self._order), key) for key, at in self._at.items()]
            heapq.heapify(self._heap)

    def discard(self, key: str) -> None:
        """Forget ``key`` (if it is there)."""
        self._at.pop(key, None)

    def first(self) -> tuple[str, float] | None:
        """The id with the earliest time, and that time; None when empty."""
        heap, at = self._heap, self._at
        while heap and at.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)  # left behind by a later ``set`` or a ``discard``
        return (heap[0][2], heap[0][0]) if heap else None

    def clear(self) -> None:
        """Forget every id."""
        self._at.clear()
        self._heap.clear()
