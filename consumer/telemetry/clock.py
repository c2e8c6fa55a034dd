"""Where span assembly takes its time from: the wall clock (``run``) or the log's (``replay``).

``TraceAssembly`` closes traces by time (quiet, max wait). Running live, that time is the
monotonic clock (``WallClock``): a record's spans arrive when it is fetched, and traces close
as the clock passes, even while nothing is fetched. A replay reads the log much faster than it
was written, so it takes the log's time instead (``LogClock``): then the same records close
the same traces however fast they are read.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable
from typing import Protocol


class TraceClock(Protocol):
    """A partition's time for its span assembly, in seconds."""

    def arrival(self, partition: Hashable, offset: int, timestamp_ms: int) -> float:
        """When the record at ``offset`` (with Kafka timestamp ``timestamp_ms``) arrived."""
        ...

    def now(self, partition: Hashable) -> float:
        """The partition's present, to close its traces by."""
        ...

    def at_end(self, partition: Hashable) -> bool:
        """Will no more spans come to the partition? Its traces still open then never close
        by time: they are left unjudged (``SpanPath.close_due``)."""
        ...


class WallClock:
    """The live worker's time: the monotonic clock, the same for every partition."""

    def arrival(self, partition: Hashable, offset: int, timestamp_ms: int) -> float:
        """Now: the spans arrive when their record is fetched."""
        return time.monotonic()

    def now(self, partition: Hashable) -> float:
        """The monotonic clock."""
        return time.monotonic()

    def at_end(self, partition: Hashable) -> bool:
        """Never: a live topic goes on."""
        return False


class LogEnds(Protocol):
    """Where a replay's reading of each partition ends (``commands/replay_window.Window``)."""

    def read_through(self, partition: Hashable, last_added: int | None) -> bool:
        """Was the partition read to its end, and every record handed on added (the last one
        the assembly took: ``last_added``)?"""
        ...


class LogClock:
    """A replay's time: the records' timestamps.

    A record arrives at its Kafka timestamp (one without takes the partition's latest). A
    partition's present is the latest timestamp read on it: per partition, so that one read
    ahead of the others closes none of their traces by a quiet that never was.

    Once a partition was read to its end (its end offset when the replay started) and the
    assembly took every record handed on, no span will come: its present is then
    ``ended_at``, the wall-clock time the replay started (the moment its end offsets were
    read), or its latest timestamp if that is later. Traces due by then close as they did
    (or will) live; one still open was still being written when the replay started, and is
    the live worker's to judge whole: ``at_end`` says so, and it is left unjudged.
    """

    def __init__(self, ends: LogEnds, ended_at: float) -> None:
        """``ended_at``: the replay's start, in seconds since the epoch (as timestamps)."""
        self._ends = ends
        self._ended_at = ended_at
        self._latest: dict[Hashable, float] = {}
        self._last_added: dict[Hashable, int] = {}

    def arrival(self, partition: Hashable, offset: int, timestamp_ms: int) -> float:
        """The record's timestamp, in seconds; the partition's present moves on to it."""
        latest = self._latest.get(partition, -math.inf)
        at = timestamp_ms / 1000 if timestamp_ms >= 0 else max(latest, 0.0)
        self._latest[partition] = max(latest, at)
        self._last_added[partition] = offset
        return at

    def now(self, partition: Hashable) -> float:
        """The latest timestamp read on the partition; at its end, the replay's start."""
        latest = self._latest.get(partition, -math.inf)
        return max(latest, self._ended_at) if self.at_end(partition) else latest

    def at_end(self, partition: Hashable) -> bool:
        """Was the partition read to its end, every record handed on added?"""
        return self._ends.read_through(partition, self._last_added.get(partition))
