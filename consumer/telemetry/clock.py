"""Where span assembly takes its time from: the wall clock (``run``) or the log's (``replay``).

``TraceAssembly`` closes traces by time (quiet, max wait). Running live, that time is the
monotonic clock: a record's spans arrive when it is fetched, and traces close as the clock
passes, even while nothing is fetched. A replay reads the log much faster than it was
written, so it takes the log's time instead (``commands/replay_spans.LogClock``): then the
same records close the same traces however fast they are read.
"""

from __future__ import annotations

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


class WallClock:
    """The live worker's time: the monotonic clock, the same for every partition."""

    def arrival(self, partition: Hashable, offset: int, timestamp_ms: int) -> float:
        """Now: the spans arrive when their record is fetched."""
        return time.monotonic()

    def now(self, partition: Hashable) -> float:
        """The monotonic clock."""
        return time.monotonic()
