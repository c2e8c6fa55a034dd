"""The span formats' way (``TRACES_FORMAT=otlp_proto|otlp_json``): records -> each partition's
trace assembly -> one task per closed trace -> verdict -> the offsets it held done.

The commit order of ``pipeline.py`` holds with one change, which ``TraceAssembly`` tracks: a
record's offset is done once every trace it has spans of is finished (its verdict
acknowledged, or it got none). So the watermark never passes the first record of an open
trace; the commit's progress lists the records not done above it and the finished traces
spread over them, and whoever reads the partition next (after a revoke or a restart)
re-reads just those records, reassembling each open trace whole (``pipeline/progress.py``).

Records are decoded and added in the fetch loop, in offset order (the assembly needs that;
decoding is CPU only); what is due by a record's arrival closes before it is added, so its
spans are late to those traces wherever the timer stood. Closing is otherwise by time, in a
timer independent of fetching. Time is the read frontier's (``telemetry/clock.FrontierClock``:
the records' timestamps, running with the wall clock only while a partition is read to its
end), or in a replay the log's (``read_log``). Neither passes while a partition is paused or
lagging, so no trace closes for want of records not read yet; instead, at ``MAX_OPEN_TRACES``
the oldest open trace closes as records are added (``closed_by: "capacity"``; a replay closes
the next due, as it would have), and ``close_stalled`` frees a pause that nothing else would.
A closed trace is judged in its own task,
kept in the pipeline's per-partition task set, so a revoke and the drain wait for it or
cancel it as they do a record's task. The drain stops the timer first: open traces are not
judged early; their records stay uncommitted and are reassembled after the restart. A
closed trace's own way to its verdict is ``traces.py``'s.

With ``OTLP_LOGS_TOPIC`` one assembly reads a partition number of both topics (co-partitioned:
the assignor gives a worker the same numbers of both, ``kafka/copartitioned.py``): the logs
topic's GenAI records join their traces there, and each record's ref names its topic
(``telemetry/record_refs.py``). The pair's time is its slower topic's: a trace closes only
once both are read past it (``now``), and the done records go back to their own topic's
offsets.

The span metrics are counted here (``ops/metrics.py``), and the signs that a trace's spans
are spread over partitions noticed (``split_traces.py``).
"""

from __future__ import annotations

import asyncio
import heapq
import math
import time
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol
from weakref import WeakKeyDictionary

import structlog

from consumer.errors import DecodeError
from consumer.inputs.formats import SpanFormat
from consumer.kafka.partitions import Partition
from consumer.ops import metrics
from consumer.pipeline.delivery.sink import Record
from consumer.pipeline.offsets import OffsetTracker, PartitionOffsets
from consumer.pipeline.records import RecordPath, internal_error
from consumer.pipeline.split_traces import SplitWatch
from consumer.pipeline.traces import TracePath
from consumer.rules.rule_set import RuleSet
from consumer.telemetry.assembly import AssemblyCounts, AssemblyLimits, ClosedTrace, TraceAssembly
from consumer.telemetry.clock import FrontierClock, TraceClock, WallClock
from consumer.telemetry.record_refs import LOGS_LANE, SPANS, Lane, lane_of, offset_of, record_ref
from consumer.telemetry.spans import DecodedRecord

log = structlog.get_logger(__name__)

TIMER_MAX_SLEEP_S = 0.2  # bounds the delay of a trace that opened while the timer slept
TIMER_MIN_SLEEP_S = 0.005
MIN_REMEMBERED_IDS = 1_000  # per partition, however many a worker owns
EARLY_LOG_EVERY_S = 10.0  # traces closed early or at capacity: one warning at most this often
AHEAD_HOLD_S = 30.0  # a pair's topic read this far ahead of the other is held (or 2 x quiet)
_SPANS_KEPT = metrics.SPANS.labels("kept")
_SPANS_DROPPED = metrics.SPANS.labels("dropped")
_LOGS_KEPT = metrics.LOG_RECORDS.labels("kept")
_LOGS_DROPPED = metrics.LOG_RECORDS.labels("dropped")


Tasks = dict[Hashable, set[asyncio.Task[None]]]
Pair = int  # an assembly's key: the partition number it reads of the spans (and logs) topic


class ClosedTraces(Protocol):
    """Where a closed trace goes: ``TracePath`` (judged), or a dry run's counter."""

    async def handle(self, tp: Partition, closed: ClosedTrace, bound: Any) -> None:
        """Return once the trace's outcome is settled; never raise."""
        ...


class SpanPath:
    """The owned partitions' assemblies, the closing timer, and the closed traces' tasks."""

    def __init__(
        self,
        records: RecordPath,
        rules: RuleSet,
        span_format: SpanFormat,
        limits: AssemblyLimits,
        tracker: OffsetTracker[Hashable],
        tasks: Tasks,
        clock: TraceClock | None = None,
        *,
        max_judging: int,
        logs_topic: str | None = None,
    ) -> None:
        """``logs_topic``: ``OTLP_LOGS_TOPIC``, read with the spans (None: spans alone)."""
        self._records = records
        self._rules = rules
        self._traces: ClosedTraces = TracePath(records, rules)
        self._split = SplitWatch()
        # What each assembly's counts were when last added to the metrics (counts only grow).
        self._reported: WeakKeyDictionary[TraceAssembly, AssemblyCounts] = WeakKeyDictionary()
        self._decoders = {SPANS: span_format.decoder()}
        self._logs_topic = logs_topic
        if logs_topic is not None:
            self._decoders[LOGS_LANE] = span_format.logs_decoder()
        self.limits = limits
        self._tracker = tracker  # the pipeline's: offsets are marked done here
        self._tasks = tasks  # the pipeline's: revoke and drain wait for these
        self._clock: TraceClock = clock or WallClock()
        # A replay's: each partition's window [start, stop); traces open only in it.
        self._windows: dict[Hashable, tuple[int, int]] = {}
        self._early = _EveryFew("traces_closed_early")  # a replay's, when its time cannot pass
        self._capacity = _EveryFew("traces_closed_for_capacity")
        self._assemblies: dict[Pair, TraceAssembly] = {}  # the partitions being closed
        self._leaving: dict[Pair, TraceAssembly] = {}  # revoked, their tasks finishing
        self._lanes: dict[Pair, dict[Lane, Partition]] = {}  # each pair's partitions owned
        # Partitions fetched in this round whose records are not all added yet: aiokafka's
        # position is past them already, so "read to its end" would be said too soon.
        self._fetched: set[Partition] = set()
        self._holding: set[Partition] = set()  # what ``ahead`` said last
        self._timer: asyncio.Task[None] | None = None
        # A timer tick may close thousands of traces at once (all of MAX_OPEN_TRACES): they
        # wait for the judge as the spans they already are. Their candidates, requests and
        # calls are made ``max_judging`` at a time (the pipeline's ``max_in_flight``), each of
        # those holding kilobytes more while it waits for one of the judge's slots.
        self._judging = asyncio.Semaphore(max_judging)

    @property
    def open_traces(self) -> int:
        """Traces being assembled, over every owned partition."""
        return sum(assembly.open_count for assembly in self._assemblies.values())

    @property
    def _over_limit(self) -> bool:
        """More open traces than ``MAX_OPEN_TRACES``, or more bytes held than the bound."""
        held = sum(assembly.held_bytes for assembly in self._assemblies.values())
        return (self.open_traces > self.limits.max_open_traces
                or held > self.limits.max_held_bytes)

    def open_on(self, tp: Partition) -> int:
        """Traces being assembled on one partition (and its pair)."""
        assembly = self._assemblies.get(tp.partition)
        return 0 if assembly is None else assembly.open_count

    @property
    def counts(self) -> AssemblyCounts:
        """The assembly counts of the partitions held, added up (a replay's summary)."""
        held = [*self._assemblies.values(), *self._leaving.values()]
        return sum((assembly.counts for assembly in held), AssemblyCounts())

    def read_log(self, clock: TraceClock, windows: Mapping[Hashable, tuple[int, int]],
                 traces: ClosedTraces | None = None) -> None:
        """Replay a window (before any partition is assigned): take time from ``clock`` (the
        log's), and open traces only in each partition's ``windows`` ``[start, stop)``.
        Records from the stop on feed only the traces already open; those before the start
        (the lead-in) only tell which traces began before the window, never to open here. A
        record outside the window that cannot be decoded is not the window's: passed, not
        dead-lettered. ``traces``: where closed traces go instead of the judge (a dry run)."""
        self._clock = clock
        self._windows = dict(windows)
        if traces is not None:
            self._traces = traces

    # -- partitions ------------------------------------------------------------------------

    def lane(self, tp: Partition) -> Lane:
        """Which of the pair's topics the partition is of."""
        return LOGS_LANE if tp.topic == self._logs_topic else SPANS

    def assigned(self, tp: Partition) -> None:
        """Start assembling the partition (from its committed offset), with its pair."""
        pair = tp.partition
        lanes = self._lanes.setdefault(pair, {})
        lanes[self.lane(tp)] = tp
        self._leaving.pop(pair, None)
        if pair not in self._assemblies:
            self._assemblies[pair] = TraceAssembly(self.limits)
            self._share_memory()
        if tp in self._windows:  # a replay's window of this topic's records
            self._assemblies[pair].window(self.lane(tp), *self._windows[tp])

    def unpaired(self, assignment: Collection[Partition]) -> list[Partition]:
        """The partitions of ``assignment`` (the whole of it) whose pair of the other topic
        is not in it: the group dealt by another strategy (``kafka/copartitioned.py``), and
        their traces are judged without the other topic's records. Warned of here."""
        if self._logs_topic is None:
            return []
        lanes: dict[Pair, set[Lane]] = {}
        for tp in assignment:
            lanes.setdefault(tp.partition, set()).add(self.lane(tp))
        alone = sorted((tp for tp in assignment if len(lanes[tp.partition]) < 2),
                       key=lambda tp: (tp.topic, tp.partition))
        if alone:
            log.warning("partitions_not_copartitioned", partitions=[str(tp) for tp in alone],
                        detail="another strategy dealt them (a member without OTLP_LOGS_TOPIC "
                               "in the group?): their traces miss the other topic's records")
        return alone

    def stop_closing(self, revoked: Collection[Partition]) -> None:
        """Close no more of these partitions' traces; those already closed still finish."""
        for tp in revoked:
            if (assembly := self._assemblies.pop(tp.partition, None)) is not None:
                self._leaving[tp.partition] = assembly
        metrics.OPEN_TRACES.set(self.open_traces)  # a revoked partition's are not ours now

    def forget(self, tp: Partition) -> None:
        """Drop the partition's traces: nothing more is done; the next owner reassembles.
        A pair is revoked whole: aiokafka's rebalance revokes every partition before it
        assigns any (and exactly once, whose ``forget_partition`` takes one alone, is refused
        with a logs topic), so no pair loses one topic while the other is still assembled."""
        pair = tp.partition
        for held in (self._assemblies, self._leaving):
            if (assembly := held.pop(pair, None)) is not None:
                assembly.drop_all()
        lanes = self._lanes.get(pair, {})
        lanes.pop(self.lane(tp), None)
        self._fetched.discard(tp)
        if not lanes:
            self._lanes.pop(pair, None)
        if isinstance(self._clock, FrontierClock):
            self._clock.forget(tp)
        self._share_memory()
        metrics.OPEN_TRACES.set(self.open_traces)

    def _share_memory(self) -> None:
        """Split the worker's bound on remembered ids among the partitions it owns: a worker
        of twelve partitions must not remember twelve times as much as one of one."""
        share = max(MIN_REMEMBERED_IDS,
                    self.limits.max_remembered_ids // max(1, len(self._assemblies)))
        for assembly in self._assemblies.values():
            assembly.remember_at_most(share)

    # -- records (in the fetch loop, in offset order) ----------------------------------------

    def fetched(self, partitions: Collection[Partition]) -> None:
        """One fetch brought records of ``partitions``, to be added next (``accept``): until
        each is, its topic holds its pair's time back, however far aiokafka has read."""
        self._fetched.update(partitions)

    def accept(self, tp: Partition, offsets: PartitionOffsets, records: Sequence[Record]) -> None:
        """Track, decode and assemble fetched records; dead-letter the undecodable ones."""
        self.accept_batch({tp: (offsets, records)})

    def accept_batch(
        self, batch: Mapping[Partition, tuple[PartitionOffsets, Sequence[Record]]],
    ) -> dict[Partition, int]:
        """``accept`` one fetch's records of every partition. A pair's two topics are added
        together in time order, and the records of one past the other's records by more than
        ``ahead``'s hold are not added: returned, per partition, is the offset to put its
        reading back to (the caller seeks there, and holds it)."""
        self.fetched(batch)
        put_back: dict[Partition, int] = {}
        try:
            by_pair: dict[Pair, list[Partition]] = {}
            for tp in batch:
                by_pair.setdefault(tp.partition, []).append(tp)
            for pair, partitions in by_pair.items():
                for tp in partitions:
                    if pair not in self._assemblies or self.lane(tp) not in self._lanes.get(
                            pair, {}):
                        self.assigned(tp)  # not handed over (or revoking): the caller checked
                    if (inherited := batch[tp][0].inherited) is not None:
                        self._assemblies[pair].inherit(inherited.closed)
                put_back |= self._add_pair(pair, {tp: batch[tp] for tp in partitions})
                self._report(self._assemblies[pair])
        finally:
            self._fetched.difference_update(batch)
        return put_back

    def _add_pair(self, pair: Pair,
                  batch: Mapping[Partition, tuple[PartitionOffsets, Sequence[Record]]],
                  ) -> dict[Partition, int]:
        """Add one pair's records, merged by timestamp (each topic's in offset order)."""
        assembly, lanes = self._assemblies[pair], list(self._lanes[pair].values())
        if len(lanes) == 1:
            [(tp, (offsets, records))] = batch.items()
            for record in records:
                self._add_one(tp, pair, offsets, assembly, record)
            return {}
        left = {tp: len(batch[tp][1]) if tp in batch else 0 for tp in lanes}
        stopped: dict[Partition, int] = {}
        first: dict[Partition, float] = {}  # each one's first record of the fetch (seconds)
        hold_s = self._hold_s
        merged = heapq.merge(*([(record.timestamp, tp, record) for record in records]
                               for tp, (_, records) in batch.items()), key=lambda e: e[0])
        for timestamp, tp, record in merged:
            if tp in stopped:
                continue
            left[tp] -= 1
            other = lanes[1] if lanes[0] == tp else lanes[0]
            # Past the other's time, or (it has none yet: its first records not fetched) past
            # this one's first record of the fetch, which is always added: putting back both
            # in turn from nothing would read nothing, ever.
            # Only the one ahead in time is put back: the one behind always reads on, so two
            # topics whose next records are both far past the other's time (traffic a minute
            # apart) never wait for each other.
            since = self._clock.now(other)
            ahead = self._clock.now(tp) >= since
            since = since if since > -math.inf else first.setdefault(tp, timestamp / 1000)
            if (ahead and not left[other] and not self._clock.caught_up(other)
                    and timestamp / 1000 - since > hold_s):
                stopped[tp] = record.offset  # the other's records are not read this far yet
                self._holding.add(tp)
                continue
            self._add_one(tp, pair, batch[tp][0], assembly, record)
        return stopped

    def _add_one(self, tp: Partition, pair: Pair, offsets: PartitionOffsets,
                 assembly: TraceAssembly, record: Record) -> None:
        if not metrics.taken(offsets.take(record.offset)):
            return  # its previous owner finished it (the commit's progress)
        lane = self.lane(tp)
        arrival = self._clock.arrival(tp, record.offset, record.timestamp)
        self._start_judging(pair, assembly, assembly.due(self.now(pair, tp, arrival)))
        try:
            decoded = self._decoders[lane](record.value or b"")
            self._notice(tp, record, decoded)
            fresh = self._not_open(assembly, decoded)
            done = assembly.add(record_ref(record.offset, lane), decoded, arrival)
            self._check_split(tp, assembly, fresh)
        except DecodeError as exc:
            self._reject(tp, offsets, record, exc.reason, undecodable=True)
            return
        except Exception as exc:  # a bug must not stall the partition: park the record
            log.exception("record_failed", partition=record.partition, offset=record.offset)
            self._reject(tp, offsets, record, internal_error(exc), undecodable=False)
            return
        for ref in done:
            offsets.done(offset_of(ref))
        if self._over_limit:
            self._close_to_limit()

    @property
    def _hold_s(self) -> float:
        """How far one topic of a pair may be read past the other (``ahead``)."""
        return max(AHEAD_HOLD_S, 2 * self.limits.quiet_s)

    def now(self, pair: Pair, arriving: Partition | None = None, arrival: float = 0.0) -> float:
        """The pair's present (with ``arriving``'s time the ``arrival`` of its record just
        read): its slower topic's, for a trace is whole only once both are read past it. A
        partition read to its end holds the other back no longer (its time runs with the wall
        clock, or it has none yet: a logs topic that is quiet)."""
        lanes = self._lanes.get(pair, {})

        def present(tp: Partition) -> float:
            return arrival if tp == arriving else self._clock.now(tp)

        if len(lanes) < 2:
            return present(next(iter(lanes.values()))) if lanes else -math.inf
        # The arriving record's own topic is not read up to it yet: its record is not added;
        # nor is one whose fetched records wait their turn.
        times = [(present(tp), tp != arriving and tp not in self._fetched
                  and self._clock.caught_up(tp)) for tp in lanes.values()]
        behind = [now for now, caught_up in times if not caught_up]
        return min(behind) if behind else max(now for now, _ in times)

    def ahead(self, owned: Collection[Partition]) -> set[Partition]:
        """The partitions of ``owned`` to hold back: a pair's topic whose time is more than
        ``AHEAD_HOLD_S`` past the other's while that one still has records to read (an hour
        of backlog on one topic, or a logs topic of many more records). Each of its traces
        would wait open for the other's records meanwhile; held, they wait as records. One
        held is let go once the other is within half that, or read to its end."""
        held: set[Partition] = set()
        hold_s = self._hold_s
        for lanes in self._lanes.values():
            if len(lanes) < 2 or not all(tp in owned for tp in lanes.values()):
                continue
            (first, second) = lanes.values()
            for tp, other in ((first, second), (second, first)):
                if self._clock.caught_up(other) and other not in self._fetched:
                    continue
                gap = self._clock.now(tp) - self._clock.now(other)
                if gap > hold_s or (tp in self._holding and gap > hold_s / 2):
                    held.add(tp)
        self._holding = held
        return held

    def _done(self, pair: Pair, refs: Sequence[int],
              owned: Mapping[Lane, tuple[Partition, PartitionOffsets]]) -> None:
        """Mark the records done in their own topic's offsets, unless that partition was
        revoked (and maybe assigned again) since ``owned`` was taken."""
        for ref in refs:
            tp, offsets = owned[lane_of(ref)]
            if self._tracker.current(tp) is offsets:
                offsets.done(offset_of(ref))

    def _owned(self, pair: Pair) -> dict[Lane, tuple[Partition, PartitionOffsets]]:
        return {lane: (tp, offsets) for lane, tp in self._lanes.get(pair, {}).items()
                if (offsets := self._tracker.current(tp)) is not None}

    def closed_keys(self, tp: Partition) -> list[bytes]:
        """The pair's finished traces still spread over records not done (the commit's
        progress; both topics' commits carry them all)."""
        assembly = self._assemblies.get(tp.partition) or self._leaving.get(tp.partition)
        return [] if assembly is None else assembly.closed_keys()

    def _report(self, assembly: TraceAssembly) -> None:
        """Add to the span metrics what the assembly counted since its last report."""
        counts = assembly.counts
        seen = self._reported.setdefault(assembly, AssemblyCounts())
        _SPANS_KEPT.inc(counts.spans_kept - seen.spans_kept)
        _SPANS_DROPPED.inc(counts.spans_dropped - seen.spans_dropped)
        metrics.LATE_SPANS.inc(counts.late_spans - seen.late_spans)
        self._reported[assembly] = replace(counts)
        metrics.OPEN_TRACES.set(self.open_traces)

    def _notice(self, tp: Partition, record: Record, decoded: DecodedRecord) -> None:
        """Say what a record held that assembly cannot use: unreadable spans, a key that is
        not its trace's."""
        logs = self.lane(tp) == LOGS_LANE
        if logs:
            _LOGS_KEPT.inc(len(decoded.logs))
            _LOGS_DROPPED.inc(decoded.logs_dropped)
        if decoded.problem is not None:
            what = {"log_records": decoded.invalid} if logs else {"spans": decoded.invalid}
            log.warning("otlp_log_records_unreadable" if logs else "otlp_spans_unreadable",
                        topic=tp.topic, partition=tp.partition, offset=record.offset,
                        reason=decoded.problem, **what)
        self._split.record(tp, record.key, decoded.spans_per_trace.keys())

    def _not_open(self, assembly: TraceAssembly, decoded: DecodedRecord) -> list[str]:
        """The record's traces not open here yet; only a worker of several partitions asks."""
        if len(self._assemblies) < 2:
            return []
        return [trace_id for trace_id in decoded.spans_per_trace
                if not assembly.is_open(trace_id)]

    def _check_split(self, tp: Partition, assembly: TraceAssembly, fresh: list[str]) -> None:
        """Traces this record opened that another of this worker's partitions holds open."""
        for trace_id in fresh:
            if assembly.is_open(trace_id):
                self._split.opened(tp, trace_id, [
                    self._lanes[other].get(SPANS, tp) for other, held in self._assemblies.items()
                    if other != tp.partition and held.is_open(trace_id)
                ])

    def _reject(self, tp: Partition, offsets: PartitionOffsets, record: Record, reason: str,
                *, undecodable: bool) -> None:
        window = self._windows.get(tp)
        if window is not None and not window[0] <= record.offset < window[1]:
            offsets.done(record.offset)  # outside a replay's window: another replay's to report
            return
        self._spawn(tp, self._dead_letter(tp, offsets, record, reason, undecodable))

    async def _dead_letter(
        self, tp: Partition, offsets: PartitionOffsets, record: Record, reason: str,
        undecodable: bool,
    ) -> None:
        bound = log.bind(topic=record.topic, partition=record.partition, offset=record.offset)
        await self._records.dead_letter(record, reason, bound, undecodable=undecodable)
        if self._tracker.current(tp) is offsets:
            offsets.done(record.offset)

    # -- the timer --------------------------------------------------------------------------

    def start(self) -> None:
        """Start closing traces by time (until ``stop``)."""
        if self._timer is None:
            self._timer = asyncio.create_task(self._run_timer())

    async def stop(self) -> None:
        """Close no more traces (the drain): open ones stay open, their records uncommitted."""
        if self._timer is not None:
            self._timer.cancel()
            await asyncio.gather(self._timer, return_exceptions=True)
            self._timer = None

    async def _run_timer(self) -> None:
        while True:
            try:
                self.close_due()
            except Exception:  # a bug must not stop every partition's closing for good
                log.exception("trace_timer_failed")
            waits = [at - self.now(pair) for pair, assembly in self._assemblies.items()
                     if (at := assembly.next_due_at()) is not None]
            wait = min(waits, default=TIMER_MAX_SLEEP_S)
            await asyncio.sleep(min(max(wait, TIMER_MIN_SLEEP_S), TIMER_MAX_SLEEP_S))

    def close_due(self) -> int:
        """Close the traces ready by each partition's clock and start judging each; return
        how many."""
        started = 0
        for pair, assembly in list(self._assemblies.items()):
            lanes = self._lanes.get(pair, {})
            if not self._owned(pair):
                continue
            started += self._start_judging(pair, assembly, assembly.due(self.now(pair)))
            if assembly.open_count and all(map(self._clock.at_end, lanes.values())):
                self._leave_open(pair, assembly)
        return started

    def _leave_open(self, pair: Pair, assembly: TraceAssembly) -> None:
        """A replay read the partition to its end, and traces are still open by the time it
        started (``telemetry/clock.LogClock``): they were still being written then, the live
        worker's to judge whole under the same verdict ids. Leave them unjudged, their
        records done."""
        before = assembly.counts.open_at_end
        self._done(pair, assembly.leave_open(), self._owned(pair))
        log.warning("traces_open_at_end", partition=pair,
                    traces=assembly.counts.open_at_end - before)
        self._report(assembly)

    def _close_to_limit(self) -> None:
        """At ``MAX_OPEN_TRACES`` (or the bound on bytes held), as a record is added: close
        the oldest open trace over every partition, ``closed_by: "capacity"``, until below
        it. Fetching does not pause for it: time runs only as records are read, so a pause
        would wait for closes that never come. A replay closes the traces due next instead,
        labelled as they would close (counted ``closed_early``), so that the same records
        close the same traces however fast they are fetched or judged."""
        closed = 0
        while self._over_limit and (pair := self._next_to_close()) is not None:
            assembly = self._assemblies[pair]
            closed += self._start_judging(
                pair, assembly,
                assembly.close_next() if self._windows else assembly.close_oldest())
        (self._early if self._windows else self._capacity).add(
            closed, open_traces=self.open_traces, max_open_traces=self.limits.max_open_traces)

    def _next_to_close(self) -> Pair | None:
        """The partition whose trace closes first at capacity: the one due next in a replay's
        time, else the one with the oldest open trace."""
        ranked = [(at, pair) for pair, assembly in self._assemblies.items()
                  if self._owned(pair)
                  and (at := (assembly.next_due_at() if self._windows
                              else assembly.oldest_first_at)) is not None]
        return min(ranked, key=lambda entry: entry[0])[1] if ranked else None

    def close_stalled(self) -> int:
        """Close traces before their time when the window of records between fetch and
        commit is full and nothing else would free it; return how many. The pipeline calls
        it whenever it fetches while it keeps every partition paused: time passes only as
        records are read, so it cannot close the traces that hold the window. When no trace
        is being judged, the judge is not holding and every partition's progress is
        committed, the records held back by open traces fill it: the oldest open trace closes
        (``closed_by: "capacity"``); a replay closes every open trace (``closed_early``), as
        the live worker's time would have closed them all by the end of the log.
        """
        if any(self._tasks.values()) or self._rules.holding or self._tracker.changed():
            return 0  # the pause lifts by itself
        if not self._windows:
            if (pair := self._next_to_close()) is None:
                return 0
            started = self._start_judging(pair, self._assemblies[pair],
                                          self._assemblies[pair].close_oldest())
            self._capacity.add(started, open_traces=self.open_traces, window_full=True)
            return started
        started = 0
        for pair, assembly in list(self._assemblies.items()):
            if self._owned(pair):
                started += self._start_judging(pair, assembly, assembly.close_all())
        self._early.add(started, open_traces=self.open_traces,
                        max_open_traces=self.limits.max_open_traces)
        return started

    def _start_judging(self, pair: Pair, assembly: TraceAssembly,
                       closed: list[ClosedTrace]) -> int:
        owned = self._owned(pair) if closed else {}
        for trace in closed:
            metrics.TRACES_CLOSED.labels(trace.closed_by).inc()
            # Its verdict's source: the record of its first span (else of its first log
            # record), in that record's own topic.
            tp, _ = owned.get(lane_of(trace.first_offset)) or next(iter(owned.values()))
            self._spawn(tp, self._judge(
                tp, replace(trace, first_offset=offset_of(trace.first_offset)), assembly, owned))
        if closed:  # kept spans are counted as their trace closes
            self._report(assembly)
        return len(closed)

    # -- one closed trace -------------------------------------------------------------------

    async def _judge(
        self, tp: Partition, closed: ClosedTrace, assembly: TraceAssembly,
        owned: Mapping[Lane, tuple[Partition, PartitionOffsets]],
    ) -> None:
        async with self._judging:
            bound = log.bind(topic=tp.topic, partition=tp.partition, trace_id=closed.trace_id,
                             offset=closed.first_offset)
            await self._traces.handle(tp, closed, bound)
        # The records it held may now be done; a completion for a partition revoked (and
        # maybe re-assigned) meanwhile is dropped.
        self._done(tp.partition, assembly.finished(closed.trace_id), owned)

    def _spawn(self, tp: Partition, work: Any) -> None:
        tasks = self._tasks.setdefault(tp, set())
        task: asyncio.Task[None] = asyncio.create_task(work)
        tasks.add(task)
        task.add_done_callback(tasks.discard)


class _EveryFew:
    """A warning about traces closed before their time, at most every ``EARLY_LOG_EVERY_S``
    (the counts keep them all)."""

    def __init__(self, event: str) -> None:
        self._event = event
        self._logged_at = -float("inf")
        self._unlogged = 0

    def add(self, traces: int, **context: object) -> None:
        self._unlogged += traces
        now = time.monotonic()
        if self._unlogged and now - self._logged_at >= EARLY_LOG_EVERY_S:
            log.warning(self._event, traces=self._unlogged, every_s=EARLY_LOG_EVERY_S, **context)
            self._logged_at, self._unlogged = now, 0
