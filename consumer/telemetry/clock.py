"""Where span assembly takes its time from: the read frontier (``run``) or the log (``replay``).

``TraceAssembly`` closes traces by time (quiet, max wait). That time must be the time of the
records read, not of the wall: a partition paused (the window full, the judge down), lagging
or catching up after downtime has records it has not read yet, and a wall clock running
meanwhile would close its traces without them. So the live worker takes ``FrontierClock``:
a partition's present is the latest record timestamp read on it, and it runs with the wall
clock only while the partition is read up to its end (nothing left to read, not paused),
which is when an absent span truly is absent. A replay takes ``LogClock``, the records' time
alone, so that the same records close the same traces however fast they are read.
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

    def caught_up(self, partition: Hashable) -> bool:
        """Is the partition read to the end of what it holds now? One partition of a pair
        (spans and logs, ``SpanPath.now``) that is holds the other's time back no longer."""
        ...


class WallClock:
    """The monotonic clock, the same for every partition (for tests of assembly alone)."""

    def arrival(self, partition: Hashable, offset: int, timestamp_ms: int) -> float:
        """Now: the spans arrive when their record is fetched."""
        return time.monotonic()

    def now(self, partition: Hashable) -> float:
        """The monotonic clock."""
        return time.monotonic()

    def at_end(self, partition: Hashable) -> bool:
        """Never: a live topic goes on."""
        return False

    def caught_up(self, partition: Hashable) -> bool:
        """Always: the records count as read when they come."""
        return True


class ReadEnds(Protocol):
    """Is a partition read up to its end offset (and not paused), so that time without
    records is time without spans?"""

    def __call__(self, partition: Hashable) -> bool: ...


MAX_AHEAD_S = 60.0  # a record stamped further ahead of this machine's clock does not move time


class FrontierClock:
    """The live worker's time: per partition, the latest record timestamp read, running on
    with the monotonic clock while the partition is read to its end.

    Sampled at each arrival and each timer tick, so a switch between reading to the end and
    lagging is placed at most one tick late (the timer's 0.2 s). A record stamped more than
    ``MAX_AHEAD_S`` past this machine's wall clock (a producer's clock far off, or a hostile
    record) does not move the partition's time: it would close every open trace at once.
    """

    def __init__(self, read_to_end: ReadEnds) -> None:
        self._read_to_end = read_to_end
        self._now: dict[Hashable, float] = {}  # the partition's present, in record time (s)
        self._sampled: dict[Hashable, float] = {}  # monotonic time of the last sample

    def arrival(self, partition: Hashable, offset: int, timestamp_ms: int) -> float:
        """The partition's present once this record is read (never before it)."""
        now = self.now(partition)
        stamp, wall = timestamp_ms / 1000, time.time()
        if timestamp_ms >= 0 and now < stamp <= wall + MAX_AHEAD_S:
            now = self._now[partition] = stamp
        elif now == -math.inf:  # a first record without a usable timestamp: start at the wall's
            now = self._now[partition] = wall
        return now

    def now(self, partition: Hashable) -> float:
        """The partition's present: it ran on since the last sample only if read to its end."""
        mono = time.monotonic()
        last = self._sampled.get(partition)
        self._sampled[partition] = mono
        now = self._now.get(partition, -math.inf)
        if last is not None and now > -math.inf and self._read_to_end(partition):
            now = self._now[partition] = now + (mono - last)
        return now

    def forget(self, partition: Hashable) -> None:
        """The partition was revoked: its next owner starts from its records' time."""
        self._now.pop(partition, None)
        self._sampled.pop(partition, None)

    def at_end(self, partition: Hashable) -> bool:
        """Never: a live topic goes on."""
        return False

    def caught_up(self, partition: Hashable) -> bool:
        """Read to its end offset, and not paused."""
        return self._read_to_end(partition)


class LogEnds(Protocol):
    """Where a replay's reading of each partition ends (``replay/window.Window``)."""

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

    def caught_up(self, partition: Hashable) -> bool:
        """Read to where the replay ends."""
        return self.at_end(partition)
