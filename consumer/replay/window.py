"""A replay's window: per-partition ``[start, stop)`` offsets, and the adapters the pipeline uses.

``WindowConsumer`` hands the pipeline only records below each partition's stop offset and
pauses a partition once its fetch position reaches the stop. ``Window.commit`` is the
pipeline's commit callable: it commits nothing to Kafka, it records each partition's
watermark and sets the stop event once every partition was read to its stop and every record
read has its outcome acknowledged.

A span topic's window also has an end per partition (its end offset when the replay started):
past the stop, records up to the end are handed on too, so that the traces opened in the
window see their later spans and close (the assembly opens no trace there). Such a record
is done at once unless it fed an open trace, so "read to the stop and every record handed on
done" still says the partition is finished: no trace of the window is left open. It is then
paused; at its end it is paused anyway, and ``telemetry/clock.LogClock`` says no more spans
come. It also has a lead-in: reading starts up to ``TRACE_MAX_WAIT_SECONDS`` before the
window, so that the assembly learns which traces began before it (and opens none of them).
Lead-in records are handed on, done at once, and are not the window's: not counted in
``records``, nor in the progress.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from consumer.kafka.partitions import Partition
from consumer.pipeline.progress import Commitment

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
    lead: int  # the first offset read: the start, or a span topic's lead-in before it
    end: int | None = None  # span topics: records up to here are read while traces stay open
    last_fetched: int | None = None
    reached: bool = False  # the fetch position is at the stop: every record below it was read
    ended: bool = False  # span topics: the fetch position is at the end: nothing more to read
    counted_to: int = -1  # the highest offset counted in ``records`` or ``read_on``
    records: int = 0  # records handed on in the window, from the start to below the stop
    read_on: int = 0  # records handed on past it (span topics)

    @property
    def finished(self) -> bool:
        done = self.last_fetched is None or self.watermark > self.last_fetched
        return self.reached and done

    @property
    def parked(self) -> bool:
        """Nothing more to fetch: read to the stop (or, on a span topic, finished or at the
        end)."""
        return self.reached if self.end is None else self.ended or self.finished


class Window:
    """Per-partition ``[start, stop)`` offsets, what was read, and what finished."""

    def __init__(
        self, spans: dict[Partition, tuple[int, int]], stop: asyncio.Event,
        ends: dict[Partition, int] | None = None, leads: dict[Partition, int] | None = None,
    ) -> None:
        """``ends`` (span topics): each partition's end offset, to read on to past its stop;
        ``leads`` (span topics): where each partition's lead-in starts (an empty window
        needs none)."""
        self._spans = {
            tp: _Span(start, max(start, end), start, start, reached=start >= end)
            for tp, (start, end) in spans.items()
        }
        for tp, end in (ends or {}).items():
            span = self._spans[tp]
            span.end = max(span.stop, end)
            span.ended = span.start >= span.end
        for tp, lead in (leads or {}).items():
            span = self._spans[tp]
            if not span.reached:
                span.lead = span.watermark = min(lead, span.start)
        self.stop = stop
        self.on_progress: Callable[[int], None] | None = None

    @property
    def total(self) -> int:
        """Offsets in the window (an upper bound on its records)."""
        return sum(span.stop - span.start for span in self._spans.values())

    @property
    def completed(self) -> int:
        """The window's offsets below the watermarks."""
        return sum(min(max(s.watermark, s.start), s.stop) - s.start for s in self._spans.values())

    @property
    def complete(self) -> bool:
        """Every partition read to its stop, every record read finished."""
        return all(span.finished for span in self._spans.values())

    @property
    def records(self) -> int:
        """Records read in the window."""
        return sum(span.records for span in self._spans.values())

    @property
    def read_on(self) -> int:
        """Records read past the window's stops, for its traces still open (span topics)."""
        return sum(span.read_on for span in self._spans.values())

    def stop_of(self, tp: Partition) -> int:
        """The partition's first offset past the window."""
        return self._spans[tp].stop

    def stops(self) -> dict[Partition, int]:
        """Each partition's first offset past the window."""
        return {tp: span.stop for tp, span in self._spans.items()}

    def limit_of(self, tp: Partition) -> int:
        """The partition's first offset never handed on: its stop, or a span topic's end."""
        span = self._spans[tp]
        return span.stop if span.end is None else span.end

    def starts(self) -> dict[Partition, int]:
        """Each partition's first offset in the window."""
        return {tp: span.start for tp, span in self._spans.items()}

    def leads(self) -> dict[Partition, int]:
        """Where each partition's reading begins: its start, or a lead-in before it."""
        return {tp: span.lead for tp, span in self._spans.items()}

    def ranges(self) -> dict[Partition, tuple[int, int]]:
        """Each partition's window, ``[start, stop)``."""
        return {tp: (span.start, span.stop) for tp, span in self._spans.items()}

    def is_reached(self, tp: Partition) -> bool:
        """Has the partition been read to its stop?"""
        return self._spans[tp].reached

    def is_parked(self, tp: Partition) -> bool:
        """Is there nothing more to fetch from the partition?"""
        return self._spans[tp].parked

    def reading(self) -> list[Partition]:
        """Partitions still being fetched from."""
        return [tp for tp, span in self._spans.items() if not span.parked]

    def fetched(self, tp: Partition, last_offset: int) -> None:
        """Records up to ``last_offset`` were handed on."""
        self._spans[tp].last_fetched = last_offset

    def count(self, tp: Partition, offsets: Iterable[int]) -> None:
        """Count records handed on (once each, should they be fetched again)."""
        span = self._spans[tp]
        for offset in offsets:
            if offset > span.counted_to:
                span.counted_to = offset
                if offset < span.start:
                    continue  # the lead-in: not the window's
                if offset < span.stop:
                    span.records += 1
                else:
                    span.read_on += 1

    def read_to(self, tp: Partition, position: int) -> None:
        """The partition's fetch position is ``position``: past its stop? at its end?"""
        span = self._spans[tp]
        if position >= span.stop:
            span.reached = True
        if span.end is not None and position >= span.end:
            span.ended = True

    def read_through(self, tp: Partition, last_added: int | None) -> bool:
        """Was a span topic's partition read to its end, and every record handed on added
        (``last_added``, the last one the assembly took)? Then no more spans can come."""
        span = self._spans[tp]
        if not span.ended:
            return False
        return span.last_fetched is None or (last_added is not None
                                             and last_added >= span.last_fetched)

    def rewind(self, tp: Partition, offset: int) -> None:
        """Records from ``offset`` on were put back: they will be fetched again."""
        span = self._spans[tp]
        if offset < span.stop:
            span.reached = False
        if span.end is not None and offset < span.end:
            span.ended = False
        if span.last_fetched is not None and offset <= span.last_fetched:
            span.last_fetched = offset - 1 if offset > span.lead else None

    async def commit(self, offsets: dict[Partition, Commitment]) -> dict[Partition, Commitment]:
        """The pipeline's commit callable: note the watermarks, never touch Kafka."""
        for tp, commitment in offsets.items():
            span = self._spans[tp]
            span.watermark = max(span.watermark, commitment.offset)
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
    """The pipeline's ``Consumer``: only the window's records (on a span topic, and those up
    to the end while its traces are open); a partition pauses once there is nothing more."""

    def __init__(self, consumer: Reader, window: Window) -> None:
        self._consumer = consumer
        self._window = window
        self._parked: set[Partition] = set()  # paused by the window, for good
        # A span topic's replay: the traces open on a partition (``SpanPath.open_on``).
        self.open_traces: Callable[[Partition], int] | None = None

    async def getmany(
        self, *partitions: Partition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[Partition, list[Any]]:
        """Fetch, drop records past the window, pause partitions with nothing more to read."""
        self._park(settled=True)
        batches = await self._consumer.getmany(
            *partitions, timeout_ms=timeout_ms, max_records=max_records
        )
        inside: dict[Partition, list[Any]] = {}
        for tp, records in batches.items():
            kept = [r for r in records if r.offset < self._window.limit_of(tp)]
            if kept:
                inside[tp] = kept
                self._window.fetched(tp, kept[-1].offset)
                self._window.count(tp, (r.offset for r in kept))
        # The position passes transaction markers and aborted records too, so it (not the
        # last record's offset) says when everything below the stop has been handed on.
        for tp in self._window.reading():
            self._window.read_to(tp, await self._consumer.position(tp))
        self._park(settled=False)
        self._window.check()
        return inside

    def _park(self, *, settled: bool) -> None:
        """Pause the partitions with nothing more to read. ``settled``: every record handed
        on was added to its assembly (so, before a fetch), and a span topic's partition
        read to its stop with no trace open needs no more records: none opens past it."""
        for tp in self._window.leads():
            if tp in self._parked:
                continue
            if self._window.is_parked(tp) or (
                settled and self.open_traces is not None and self._window.is_reached(tp)
                and self.open_traces(tp) == 0
            ):
                self._parked.add(tp)
                self._consumer.pause(tp)

    def assignment(self) -> set[Partition]:
        """The assigned partitions."""
        return set(self._consumer.assignment())

    def pause(self, *partitions: Partition) -> None:
        """Pause fetching (backpressure, drain)."""
        self._consumer.pause(*partitions)

    def resume(self, *partitions: Partition) -> None:
        """Resume fetching, except for partitions with nothing more to read."""
        self._consumer.resume(*[tp for tp in partitions
                                if tp not in self._parked and not self._window.is_parked(tp)])

    def seek(self, tp: Partition, offset: int) -> None:
        """Put records back (from ``offset``); a partition paused at its stop reads again."""
        parked = tp in self._parked or self._window.is_parked(tp)
        self._consumer.seek(tp, offset)
        self._window.rewind(tp, offset)
        if parked and not self._window.is_parked(tp):
            self._parked.discard(tp)
            self._consumer.resume(tp)
