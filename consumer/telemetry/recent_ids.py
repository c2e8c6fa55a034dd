"""A bounded memory of recently seen ids: the oldest is forgotten first (pure).

Assembly remembers two kinds of trace id it cannot keep forever: traces already closed (so a
late span is counted and ignored rather than opening the trace again) and roots that arrived
before any GenAI span of their trace (an HTTP server span dropped at decode, whose GenAI
children come in a later record). Most roots belong to traces with no GenAI span at all, so
the memory must forget: past ``max_ids`` the oldest id goes. Forgetting costs only accuracy
at the edges (a very late span judged as a new trace; a very early root not counted), never
an offset.
"""

from __future__ import annotations

from collections import OrderedDict


class RecentIds:
    """At most ``max_ids`` ids, in order of their last addition."""

    __slots__ = ("_ids", "max_ids")

    def __init__(self, max_ids: int) -> None:
        if max_ids < 1:
            raise ValueError(f"max_ids must be at least 1, not {max_ids}")
        self.max_ids = max_ids
        # OrderedDict, not dict: forgetting the oldest is O(1) (``popitem(last=False)``),
        # where a dict's first key gets slower to reach as deleted entries pile up before it.
        self._ids: OrderedDict[str, None] = OrderedDict()

    def add(self, id_: str) -> None:
        """Remember ``id_`` as the newest; forget the oldest beyond ``max_ids``."""
        self._ids[id_] = None
        self._ids.move_to_end(id_)
        if len(self._ids) > self.max_ids:
            self._ids.popitem(last=False)

    def resize(self, max_ids: int) -> None:
        """Remember at most ``max_ids`` from now on, forgetting the oldest beyond it."""
        if max_ids < 1:
            raise ValueError(f"max_ids must be at least 1, not {max_ids}")
        self.max_ids = max_ids
        while len(self._ids) > max_ids:
            self._ids.popitem(last=False)

    def pop(self, id_: str) -> bool:
        """Forget ``id_``; True if it was remembered."""
        if id_ not in self._ids:
            return False
        del self._ids[id_]
        return True

    def clear(self) -> None:
        """Forget every id."""
        self._ids.clear()

    def __contains__(self, id_: object) -> bool:
        return id_ in self._ids

    def __len__(self) -> int:
        return len(self._ids)
