"""A replay's window: per-partition ``[start, stop)`` offsets, and the adapters the pipeline uses.

``WindowConsumer`` hands the pipeline only records below each partition's stop offset and
pauses a partition once its fetch position reaches the stop. ``Window.commit`` is the
pipeline's commit callable: it commits nothing to Kafka, it records each partition's
watermark and sets the stop event once every partition was read to its stop and every record
read has its outcome acknowledged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from consumer.stream.partitions import Partition

log = structlog.get_logger(__name__)


class Reader(Protocol):
    """The part of a group-less Kafka consumer the window reads through."""

    async def getmany(
        self, *partitions: Partition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[Partition, list[Any]]: ...

    async def position(self, partition: Partition) -> int: ...

    def assignment(self) -> set[Partition]: ...

    def pause(self, *partitions: Partition) -> None: ...

    def resume(self, *partitions: Partition) -> None: ...

    def seek(self, partition: Partition, offset: int) -> None: ...


@dataclass(slots=True)
class _Span:
    start: int
    stop: int
    watermark: int
    last_fetched: int | None = None
    reached: bool = False  # the fetch position is at the stop: every record below it was read

    @property
    def finished(self) -> bool:
        done = self.last_fetched is None or self.watermark > self.last_fetched
        return self.reached and done


class Window:
    """Per-partition ``[start, stop)`` offsets, what was read, and what finished."""

    def __init__(self, spans: dict[Partition, tuple[int, int]], stop: asyncio.Event) -> None:
        self._spans = {
            tp: _Span(start, max(start, end), start, reached=start >= end)
            for tp, (start, end) in spans.items()
        }
        self.stop = stop
        self.on_progress: Callable[[int], None] | None = None

    @property
    def total(self) -> int:
        """Offsets in the window (an upper bound on its records)."""
        return sum(span.stop - span.start for span in self._spans.values())

    @property
    def completed(self) -> int:
        """Offsets below the watermarks."""
        return sum(min(s.watermark, s.stop) - s.start for s in self._spans.values())

    @property
    def complete(self) -> bool:
        """Every partition read to its stop, every record read finished."""
        return all(span.finished for span in self._spans.values())

    def stop_of(self, tp: Partition) -> int:
        """The partition's first offset past the window."""
        return self._spans[tp].stop

    def starts(self) -> dict[Partition, int]:
        """Where each partition's reading begins."""
        return {tp: span.start for tp, span in self._spans.items()}

    def unreached(self) -> list[Partition]:
        """Partitions still being read."""
        return [tp for tp, span in self._spans.items() if not span.reached]

    def is_reached(self, tp: Partition) -> bool:
        """Has the partition been read to its stop?"""
        return self._spans[tp].reached

    def fetched(self, tp: Partition, last_offset: int) -> None:
        """Records up to ``last_offset`` were handed on."""
        self._spans[tp].last_fetched = last_offset

    def reach(self, tp: Partition) -> None:
        """The partition's fetch position is at its stop."""
        self._spans[tp].reached = True

    def rewind(self, tp: Partition, offset: int) -> None:
        """Records from ``offset`` on were put back: they will be fetched again."""
        span = self._spans[tp]
        if offset < span.stop:
            span.reached = False
        if span.last_fetched is not None and offset <= span.last_fetched:
            span.last_fetched = offset - 1 if offset > span.start else None

    async def commit(self, offsets: dict[Partition, int]) -> dict[Partition, int]:
        """The pipeline's commit callable: note the watermarks, never touch Kafka."""
        for tp, mark in offsets.items():
            span = self._spans[tp]
            span.watermark = max(span.watermark, mark)
        if self.on_progress is not None:
            self.on_progress(self.completed)
        self.check()
        return offsets

    def check(self) -> None:
        """Set the stop event once the window is complete."""
        if self.complete and not self.stop.is_set():
            log.info("replay_window_done", offsets=self.total)
            self.stop.set()


class WindowConsumer:
    """The pipeline's ``Consumer``: only the window's records; a partition pauses at its stop."""

    def __init__(self, consumer: Reader, window: Window) -> None:
        self._consumer = consumer
        self._window = window

    async def getmany(
        self, *partitions: Partition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[Partition, list[Any]]:
        """Fetch, drop records at or past the stop, pause partitions that reached it."""
        batches = await self._consumer.getmany(
            *partitions, timeout_ms=timeout_ms, max_records=max_records
        )
        inside: dict[Partition, list[Any]] = {}
        for tp, records in batches.items():
            kept = [r for r in records if r.offset < self._window.stop_of(tp)]
            if kept:
                inside[tp] = kept
                self._window.fetched(tp, kept[-1].offset)
        # The position passes transaction markers and aborted records too, so it (not the
        # last record's offset) says when everything below the stop has been handed on.
        for tp in self._window.unreached():
            if await self._consumer.position(tp) >= self._window.stop_of(tp):
                self._window.reach(tp)
                self._consumer.pause(tp)
        self._window.check()
        return inside

    def assignment(self) -> set[Partition]:
        """The assigned partitions."""
        return set(self._consumer.assignment())

    def pause(self, *partitions: Partition) -> None:
        """Pause fetching (backpressure, drain)."""
        self._consumer.pause(*partitions)

    def resume(self, *partitions: Partition) -> None:
        """Resume fetching, except for partitions already read to their stop."""
        self._consumer.resume(*[tp for tp in partitions if not self._window.is_reached(tp)])

    def seek(self, tp: Partition, offset: int) -> None:
        """Put records back (from ``offset``); a partition paused at its stop reads again."""
        parked = self._window.is_reached(tp)
        self._consumer.seek(tp, offset)
        self._window.rewind(tp, offset)
        if parked and not self._window.is_reached(tp):
            self._consumer.resume(tp)
