"""One partition's GenAI spans (and log records) -> whole traces, closed by time; which
records are done (pure).

The caller feeds every fetched record (``add``), asks on a timer which traces are ready
(``due``), judges them, and reports each outcome once acknowledged (``finished``); ``add`` and
``finished`` return the records that are then done, for ``pipeline/offsets.PartitionOffsets``.
Records are named by ``record_refs``: a spans record by its offset, a record of the logs topic
(``OTLP_LOGS_TOPIC``, co-partitioned) by its offset in a lane of its own. A GenAI log record
counts for its trace as a span does (it opens it, is activity, holds its record, is late
after the close), and a closed trace's spans come with their log records joined to them
(``log_events.py``), so that everything downstream reads one trace.

When a trace is ready (DESIGN.md, "Telemetry input"): its root arrived (kept, or dropped as an
HTTP span) and none of its spans for ``quiet_s`` -> ``quiet``; else ``max_wait_s`` after its
first kept span -> ``max_wait``, judged with what arrived. Closing is by time alone, never by
fetching more, so a full assembly (partitions paused) still drains: no deadlock.

Offsets: a record's offset is done only when every trace it has spans of (kept or not) is
finished. The watermark (the lowest offset not done) then never passes the first record of an
open or unfinished trace, and the commit's progress (``pipeline/progress.py``) lists every
record not done above it: a restart or a new owner re-reads exactly those, and reassembles
each open trace from all its spans. A record that fed no open trace (no span of one, or only
late ones) is done at once.

A finished trace may still have spans in records held by other traces (records that carry
many traces, or a late span): it is *spread* (``record_holds.py``), and its key goes into the
progress (``closed_keys``), so whoever re-reads those records takes its spans there for late
ones (``inherit``) instead of judging the trace again from part of its spans.

``MAX_OPEN_TRACES`` (or the bytes they hold) reached: the oldest open trace closes with what it
has, ``closed_by: "capacity"`` (``close_oldest``), so fetching never waits on a clock that
cannot run while it waits.

The clock is injected: ``now`` is seconds, never decreasing (a smaller one is taken as the last
seen): the monotonic clock when the worker runs, the records' timestamps in a replay (the
caller's ``TraceClock``). Time may jump there (a quiet stretch of the log, a partition read to
its end), so a trace past both of its times is labelled by the one it reached first.

A replay opens only the traces whose first kept span is in its window, ``[opens_from,
opens_before)``. Records from ``opens_before`` on still feed the traces already open (read on
past ``--to`` until they close) and are counted for them alone; their other spans are not the
window's: neither kept, dropped nor late. Records before ``opens_from`` (the lead-in, read
from ``TRACE_MAX_WAIT_SECONDS`` before ``--from``) only say which traces began before the
window: another window's, never opened here, their spans in the window neither kept, dropped
nor late (and the roots of traces not begun yet are remembered, as live). A replay read to the
log's end leaves the traces still open there unjudged (``leave_open``): they were still being
written, the live worker's to judge whole.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import astuple, dataclass
from typing import Literal

from consumer.telemetry.bounded_spans import KeptSpans
from consumer.telemetry.log_events import join_logs
from consumer.telemetry.recent_ids import RecentIds
from consumer.telemetry.record_holds import RecordHolds
from consumer.telemetry.record_refs import LOGS_LANE, SPANS, Lane, lane_of, offset_of
from consumer.telemetry.spans import DecodedRecord, Span
from consumer.telemetry.trace_keys import trace_key

ClosedBy = Literal["quiet", "max_wait", "capacity"]


@dataclass(frozen=True, slots=True)
class AssemblyLimits:
    """When traces close, and how much one partition's assembly holds."""

    quiet_s: float = 10.0  # TRACE_QUIET_SECONDS
    max_wait_s: float = 120.0  # TRACE_MAX_WAIT_SECONDS
    max_open_traces: int = 10_000  # MAX_OPEN_TRACES: past it, the oldest closes
    max_spans_per_trace: int = 1_000  # GenAI spans kept per trace (``bounded_spans.py``)
    max_bytes_per_trace: int = 8 * 2**20  # and their estimated size
    max_held_bytes: int = 256 * 2**20  # all open traces' kept spans: past it, the oldest closes
    # Closed trace ids, and roots of traces not yet open: each, per worker (``SpanPath``
    # shares it among its partitions), or per assembly when one runs alone.
    max_remembered_ids: int = 100_000


@dataclass(frozen=True, slots=True)
class ClosedTrace:
    """A trace ready to be judged, with what the verdict's ``assembly`` and ``source`` say."""

    trace_id: str
    spans: tuple[Span, ...]  # the kept GenAI spans, in arrival order, their log records joined
    root_seen: bool
    closed_by: ClosedBy
    span_count: int  # its spans the records carried since it opened: kept, capped, non-GenAI
    capped: int  # GenAI spans not kept: over the trace's bounds (``bounded_spans.py``)
    # The ref of the record of its first kept span (else of its first log record): the
    # verdict's ``source`` (``record_refs``: without a logs topic, the offset).
    first_offset: int
    let_go: frozenset[str] = frozenset()  # ids of the GenAI spans not kept (so far as known)


@dataclass(slots=True)
class AssemblyCounts:
    """Running totals for the metrics; ``kept + dropped`` is every span the records carried."""

    spans_kept: int = 0  # counted as their trace closes, as are those over its bounds
    spans_dropped: int = 0  # no GenAI content, invalid ids, over the bounds, or late
    closed_quiet: int = 0
    closed_max_wait: int = 0
    closed_capacity: int = 0  # MAX_OPEN_TRACES (or the bytes held) reached: the oldest closed
    closed_early: int = 0  # also in quiet / max_wait: closed before their time (a replay)
    late_spans: int = 0  # spans (GenAI or not) of a trace already closed; also in dropped
    open_at_end: int = 0  # a replay's traces left open at the log's end: not judged

    def __add__(self, other: AssemblyCounts) -> AssemblyCounts:
        """Two partitions' counts together."""
        return AssemblyCounts(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


class _Open:
    """A trace being assembled."""

    __slots__ = ("first_at", "kept", "last_at", "offsets", "root_seen", "span_count")

    def __init__(self, offset: int, now: float, root_seen: bool, limits: AssemblyLimits) -> None:
        self.first_at = now
        self.last_at = now
        self.offsets = [offset]  # increasing: records come in offset order
        self.kept = KeptSpans(limits.max_spans_per_trace, limits.max_bytes_per_trace)
        self.root_seen = root_seen
        self.span_count = 0


class TraceAssembly:
    """The open traces of one partition, and the records they hold back from the commit."""

    def __init__(self, limits: AssemblyLimits, opens_before: int | None = None,
                 opens_from: int | None = None) -> None:
        """``opens_from`` / ``opens_before``: a replay's window of spans records (offsets);
        the logs topic's is set by ``window``."""
        self.limits = limits
        # Per lane, a replay's start (records before it are its lead-in) and its stop (no
        # trace opens from there on), as offsets of that lane's topic.
        self._windows: dict[Lane, tuple[int | None, int | None]] = {
            SPANS: (opens_from, opens_before), LOGS_LANE: (None, None)}
        self.counts = AssemblyCounts()
        self._open: OrderedDict[str, _Open] = OrderedDict()  # in order of first span
        self._quiet: OrderedDict[str, _Open] = OrderedDict()  # root seen; by last activity
        self._unfinished: dict[str, list[int]] = {}  # closed, outcome not yet acknowledged
        self._late_in: dict[str, list[int]] = {}  # unfinished trace -> records of its late spans
        self._holds = RecordHolds()  # offsets held by open or unfinished traces; spread ones
        self._inherited: frozenset[bytes] = frozenset()  # keys of traces a previous owner judged
        self._closed = RecentIds(limits.max_remembered_ids)
        self._early_roots = RecentIds(limits.max_remembered_ids)
        self._before_window = RecentIds(limits.max_remembered_ids)  # begun in the lead-in
        self._last_ref: dict[Lane, int] = {}  # per lane, the last record added
        self._now = float("-inf")
        self.held_bytes = 0  # the open traces' kept spans, estimated (``bounded_spans.py``)

    def window(self, lane: Lane, opens_from: int | None, opens_before: int | None) -> None:
        """Set a replay's window of one topic's records (``record_refs``), as the
        constructor's for the spans: that topic's partition is known only once assigned."""
        self._windows[lane] = (opens_from, opens_before)

    @property
    def open_count(self) -> int:
        """Traces being assembled (not yet closed)."""
        return len(self._open)

    def remember_at_most(self, ids: int) -> None:
        """Bound the closed ids and the early roots remembered to ``ids`` each."""
        self._closed.resize(ids)
        self._early_roots.resize(ids)
        self._before_window.resize(ids)

    @property
    def remembered_at_most(self) -> int:
        """The bound on closed ids (and on early roots) remembered."""
        return self._closed.max_ids

    def is_open(self, trace_id: str) -> bool:
        """Is the trace being assembled here?"""
        return trace_id in self._open

    @property
    def unfinished_count(self) -> int:
        """Traces closed whose outcome is not yet acknowledged."""
        return len(self._unfinished)

    def add(self, offset: int, decoded: DecodedRecord, now: float) -> list[int]:
        """Feed one record's spans and log records, arrived at ``now`` (its own topic's
        time); return ``[offset]`` (its ref, see ``record_refs``) if it is done at once, else
        ``[]``."""
        lane = lane_of(offset)
        last = self._last_ref.get(lane)
        if last is not None and offset <= last:
            raise ValueError(f"record {offset} is not after {last}")
        self._last_ref[lane] = offset
        # The record's time: never before the present, and never moving it (``due`` does):
        # with two topics a record's own time may be ahead of the slower one's.
        now = max(now, self._now)
        opens_from, opens_before = self._windows[lane]
        if opens_from is not None and offset_of(offset) < opens_from:
            self._lead_in(decoded)
            return [offset]
        counts = self.counts
        opening = opens_before is None or offset_of(offset) < opens_before
        if opening:
            counts.spans_dropped += decoded.dropped
        kept_for: dict[str, int] = {}  # past the stop, or begun before: each trace's kept spans
        late: set[str] = set()  # closed traces with kept spans here
        # Step 1: kept spans join their trace (opening it); a closed trace's are late.
        for span in decoded.kept:
            trace_id = span.trace_id
            trace = self._open.get(trace_id)
            if trace is None:
                if not opening:
                    continue  # past a replay's stop: not a trace of its window
                if trace_id in self._before_window:  # begun before a replay's window
                    kept_for[trace_id] = kept_for.get(trace_id, 0) + 1
                    continue
                if self._is_closed(trace_id):
                    counts.spans_dropped += 1  # counted as late in step 2, with its record
                    late.add(trace_id)
                    continue
                trace = self._open_trace(trace_id, offset, now)
            if not opening:
                kept_for[trace_id] = kept_for.get(trace_id, 0) + 1
            self.held_bytes += trace.kept.add(span)  # counted kept or dropped as it closes
            self._touch(trace_id, trace, now)
        # ... and so do GenAI log records (a logs topic's record has nothing else).
        for record in decoded.logs:
            trace_id = record.trace_id
            trace = self._open.get(trace_id)
            if trace is None:
                if not opening or trace_id in self._before_window:
                    continue
                if self._is_closed(trace_id):
                    late.add(trace_id)
                    continue
                trace = self._open_trace(trace_id, offset, now)
            self.held_bytes += trace.kept.add_log(record)
            self._touch(trace_id, trace, now)
        # Step 2: every span of an open trace, kept or not, is activity; of a closed one, late.
        for trace_id, spans in decoded.spans_per_trace.items():
            trace = self._open.get(trace_id)
            if trace is not None:
                if trace.offsets[-1] != offset:  # a re-read must see all its spans again
                    trace.offsets.append(offset)
                    self._holds.hold(offset)
                trace.span_count += spans
                self._touch(trace_id, trace, now)
                if not opening:  # the record's dropped spans, of the open traces alone
                    counts.spans_dropped += spans - kept_for.get(trace_id, 0)
            elif opening and trace_id in self._before_window:  # not the window's spans
                counts.spans_dropped -= spans - kept_for.get(trace_id, 0)
            elif opening and self._is_closed(trace_id):
                counts.late_spans += spans
        # Step 3: a root (often a dropped HTTP span) lets its trace close when quiet; one for
        # a trace not open yet is remembered, for GenAI children that come after it.
        for trace_id in decoded.roots_seen:
            trace = self._open.get(trace_id)
            if trace is not None:
                if trace.offsets[-1] != offset:  # a re-read must see its root again
                    trace.offsets.append(offset)
                    self._holds.hold(offset)
                if not trace.root_seen:
                    trace.root_seen = True
                    self._touch(trace_id, trace, now)
            elif (opening and not self._is_closed(trace_id)
                  and trace_id not in self._before_window):
                self._early_roots.add(trace_id)
        if offset not in self._holds:
            return [offset]
        # Step 4: a held record is re-read after a restart; the closed traces with spans in it
        # must then be known as closed, or it would open them again from those spans alone.
        for trace_id in late:
            if trace_id in self._unfinished:
                self._late_in.setdefault(trace_id, []).append(offset)
            else:
                self._holds.finished(trace_id, (offset,))
        return []

    def _lead_in(self, decoded: DecodedRecord) -> None:
        """A record of a replay's lead-in: its traces with kept spans began before the window
        (another window's); a root of a trace not begun is remembered, as in ``add``."""
        for span in decoded.kept:
            self._before_window.add(span.trace_id)
        for record in decoded.logs:
            self._before_window.add(record.trace_id)
        for trace_id in decoded.roots_seen:
            if trace_id not in self._before_window:
                self._early_roots.add(trace_id)

    def due(self, now: float) -> list[ClosedTrace]:
        """Close and return the traces ready at ``now`` (see the module docstring)."""
        now = self._now = max(now, self._now)
        return self._ready(now)

    def close_next(self) -> list[ClosedTrace]:
        """Close the trace(s) due next, whatever the time, labelled as they would close then
        (and counted ``closed_early``): for a replay at ``MAX_OPEN_TRACES``, whose log time
        cannot pass while it waits for them (``pipeline/spans.SpanPath._close_to_limit``)."""
        at = self.next_due_at()
        return [] if at is None else self._early(self._ready(at))

    def close_all(self) -> list[ClosedTrace]:
        """Close every open trace, each labelled as it would close were no span to come (and
        counted ``closed_early``); the time is left as it was, as in ``close_next``."""
        return self._early(self._ready(math.inf))

    def close_oldest(self) -> list[ClosedTrace]:
        """Close the oldest open trace with what it has, ``closed_by: "capacity"``: the
        worker's bound on open traces (or on the records it holds) is reached."""
        if not self._open:
            return []
        trace_id = next(iter(self._open))
        self.counts.closed_capacity += 1
        return [self._close(trace_id, "capacity")]

    @property
    def oldest_first_at(self) -> float | None:
        """When the oldest open trace opened (which partition's closes first at capacity)."""
        return next(iter(self._open.values())).first_at if self._open else None

    def inherit(self, keys: frozenset[bytes]) -> None:
        """Traces a previous owner judged that still have spans in records read again
        (``pipeline/progress.Progress.closed``): their spans are late here."""
        self._inherited = keys

    def closed_keys(self) -> list[bytes]:
        """The keys of finished traces with spans in records not yet done, for the progress."""
        return [trace_key(trace_id) for trace_id in self._holds.spread]

    def leave_open(self) -> list[int]:
        """Forget every open trace unjudged (counted ``open_at_end``): a replay read to the
        log's end, where they were still being written. Return the offsets done now, in
        order; their kept spans are counted neither kept nor dropped."""
        done: list[int] = []
        for trace_id, trace in self._open.items():
            self.counts.open_at_end += 1
            self.held_bytes -= trace.kept.size
            self._closed.add(trace_id)
            done.extend(self._holds.release(trace.offsets))
        self._open.clear()
        self._quiet.clear()
        return sorted(done)

    def next_due_at(self) -> float | None:
        """The earliest time a trace may be ready (for the caller's timer); None when empty."""
        times = []
        if self._quiet:  # the front ones are the earliest: see ``due``
            times.append(next(iter(self._quiet.values())).last_at + self.limits.quiet_s)
        if self._open:
            times.append(next(iter(self._open.values())).first_at + self.limits.max_wait_s)
        return min(times, default=None)

    def finished(self, trace_id: str) -> list[int]:
        """The trace's outcome is acknowledged: return the offsets done now, in order (its
        first one only once its whole range is done; other traces' first ones maybe too)."""
        if trace_id in self._open:
            raise ValueError(f"trace {trace_id} is still open")
        offsets = self._unfinished.pop(trace_id, None)
        if offsets is None:
            return []  # finished twice, or its partition was dropped meanwhile
        done = self._holds.release(offsets)
        self._holds.finished(trace_id, [*offsets, *self._late_in.pop(trace_id, ())])
        return done

    def drop_all(self) -> None:
        """Forget everything (partition revoked): nothing is done; the next owner reassembles."""
        self._open.clear()
        self._quiet.clear()
        self._unfinished.clear()
        self._late_in.clear()
        self._holds.clear()
        self._inherited = frozenset()
        self.held_bytes = 0
        # Closed ids too: this worker may own the partition again, re-read its records from
        # the committed offset, and must not take them for late spans then.
        self._closed.clear()
        self._early_roots.clear()
        self._before_window.clear()
        self._last_ref.clear()

    # -- internals -------------------------------------------------------------------------

    def _early(self, closed: list[ClosedTrace]) -> list[ClosedTrace]:
        self.counts.closed_early += len(closed)
        return closed

    def _ready(self, now: float) -> list[ClosedTrace]:
        quiet_s, max_wait_s = self.limits.quiet_s, self.limits.max_wait_s
        ready: list[ClosedTrace] = []
        # Step 1: root arrived and quiet; ``_quiet`` is in order of last activity. Past its
        # max wait too (time jumped there), it closed by whichever it reached first.
        while self._quiet:
            trace_id, trace = next(iter(self._quiet.items()))
            quiet_at = trace.last_at + quiet_s
            if quiet_at > now:
                break
            first: ClosedBy = "quiet" if quiet_at <= trace.first_at + max_wait_s else "max_wait"
            ready.append(self._close(trace_id, first))
        # Step 2: waited long enough; ``_open`` is in order of first span.
        while self._open:
            trace_id, trace = next(iter(self._open.items()))
            if trace.first_at + max_wait_s > now:
                break
            ready.append(self._close(trace_id, "max_wait"))
        return ready

    def _is_closed(self, trace_id: str) -> bool:
        return (trace_id in self._unfinished or trace_id in self._closed
                or (bool(self._inherited) and trace_key(trace_id) in self._inherited))

    def _open_trace(self, trace_id: str, offset: int, now: float) -> _Open:
        trace = _Open(offset, now, self._early_roots.pop(trace_id), self.limits)
        self._open[trace_id] = trace
        self._holds.hold(offset)
        return trace

    def _touch(self, trace_id: str, trace: _Open, now: float) -> None:
        trace.last_at = now
        if trace.root_seen:  # only a trace whose root arrived can close by quiet
            self._quiet[trace_id] = trace
            self._quiet.move_to_end(trace_id)

    def _close(self, trace_id: str, closed_by: ClosedBy) -> ClosedTrace:
        trace = self._open.pop(trace_id)
        self._quiet.pop(trace_id, None)
        self._unfinished[trace_id] = trace.offsets
        self._closed.add(trace_id)
        counts, kept = self.counts, trace.kept
        if closed_by == "quiet":
            counts.closed_quiet += 1
        elif closed_by == "max_wait":
            counts.closed_max_wait += 1
        counts.spans_kept += len(kept)
        counts.spans_dropped += kept.dropped  # over the bounds, or sent twice
        self.held_bytes -= kept.size
        return ClosedTrace(
            trace_id=trace_id,
            spans=join_logs(kept.spans(), kept.logs()),
            root_seen=trace.root_seen,
            closed_by=closed_by,
            span_count=trace.span_count,
            capped=kept.capped,
            let_go=frozenset(kept.let_go),
            first_offset=next((ref for ref in trace.offsets if lane_of(ref) == SPANS),
                              trace.offsets[0]),
        )
