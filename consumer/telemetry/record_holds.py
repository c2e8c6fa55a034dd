"""Which records of a partition are held back from the commit, and which finished traces
still have spans in them (pure).

A record is held by every open or unfinished trace with a span in it; it is done once none
is left. A trace that finished while a record it has spans in is still held (by another
trace) is *spread* there: a new owner re-reads that record, and must take the finished
trace's spans in it for late ones, not open the trace again from them. The spread traces go
into the commit's metadata (``pipeline/progress.py``); a trace stops being spread once every
record it has spans in is done.
"""

from __future__ import annotations

from collections.abc import Iterable, KeysView


class RecordHolds:
    """Held offsets with how many traces hold each, and the finished traces spread over them."""

    __slots__ = ("_finished_in", "_holders", "_spread")

    def __init__(self) -> None:
        self._holders: dict[int, int] = {}  # held offset -> open or unfinished traces holding it
        self._finished_in: dict[int, list[str]] = {}  # held offset -> finished traces in it
        self._spread: dict[str, int] = {}  # finished trace -> held records it has spans in

    def __contains__(self, offset: int) -> bool:
        return offset in self._holders

    def hold(self, offset: int) -> None:
        """One more trace holds ``offset``."""
        self._holders[offset] = self._holders.get(offset, 0) + 1

    def release(self, offsets: Iterable[int]) -> list[int]:
        """A trace no longer holds ``offsets`` (each once): return those done now, in order."""
        done: list[int] = []
        for offset in offsets:
            left = self._holders[offset] - 1
            if left:
                self._holders[offset] = left
                continue
            del self._holders[offset]
            done.append(offset)
            for trace_id in self._finished_in.pop(offset, ()):
                if self._spread[trace_id] == 1:
                    del self._spread[trace_id]
                else:
                    self._spread[trace_id] -= 1
        done.sort()
        return done

    def finished(self, trace_id: str, offsets: Iterable[int]) -> None:
        """A finished trace has spans in ``offsets``: it is spread over those still held."""
        for offset in offsets:
            if offset in self._holders:
                self._finished_in.setdefault(offset, []).append(trace_id)
                self._spread[trace_id] = self._spread.get(trace_id, 0) + 1

    @property
    def spread(self) -> KeysView[str]:
        """The finished traces with spans in records still held."""
        return self._spread.keys()

    def clear(self) -> None:
        """Hold nothing."""
        self._holders.clear()
        self._finished_in.clear()
        self._spread.clear()
