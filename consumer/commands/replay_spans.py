"""A span topic's replay: the log's time for its assembly, and the dry run.

Replaying spans runs the same ``Pipeline`` and ``SpanPath`` as ``run``, with two changes.
Time is the log's (``LogClock``), so the same records close the same traces however fast
they are read, and no trace waits ``TRACE_QUIET_SECONDS`` of wall time at the end. Traces
open only below each partition's stop (``SpanPath.read_log``), while the window reads on past
it until they close (``replay_window.py``). The dry run (``SpanDryRun``) reads the same
records and assembles them by the same rules, without the pipeline: no judge, no publishing.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from consumer.commands.replay_summary import DryRun
from consumer.commands.replay_window import Window
from consumer.errors import DecodeError
from consumer.judge.prompt import Limits, build_request
from consumer.stream.offsets import PartitionOffsets
from consumer.stream.partitions import Partition
from consumer.telemetry.assembly import (
    AssemblyCounts,
    AssemblyLimits,
    ClosedTrace,
    TraceAssembly,
)
from consumer.telemetry.candidate import candidate
from consumer.telemetry.otlp import OtlpEncoding, decode_otlp

if TYPE_CHECKING:
    from consumer.stream.sink import Record


class LogClock:
    """A replay's time for span assembly: the records' timestamps (``TraceClock``).

    A record arrives at its Kafka timestamp (one without takes the partition's latest). A
    partition's present is the latest timestamp read on it: per partition, so that one read
    ahead of the others closes none of their traces by a quiet that never was. Once it was
    read to its end (its end offset when the replay started) and the assembly took every
    record handed on, its present is +inf: no span will come, so every trace still open
    closes, by whichever of its times it would have reached first.
    """

    def __init__(self, window: Window) -> None:
        self._window = window
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
        """The latest timestamp read on the partition; +inf once it was read through."""
        if self._window.read_through(partition, self._last_added.get(partition)):
            return math.inf
        return self._latest.get(partition, -math.inf)


class SpanDryRun:
    """A span topic's dry run: the window assembled by the rules the replay follows, its
    closed traces classified instead of judged.

    Per partition a ``TraceAssembly`` with the replay's stop, fed in offset order on the
    log's time; what is due by a record's arrival closes before it is added, as in
    ``SpanPath.accept``. A closed trace is mapped: no candidate, skipped (empty answer) or
    would be judged (its request's estimated tokens counted). An undecodable record in the
    window would be dead-lettered. The replay's bounds hold too, and where its reading would
    stall, traces close early as there (``SpanPath.close_stalled``): at ``MAX_OPEN_TRACES``
    each partition's next one, with the uncommitted window full every open one.
    """

    def __init__(self, encoding: OtlpEncoding, limits: AssemblyLimits, judge_limits: Limits,
                 window: Window, max_uncommitted: int) -> None:
        self.dry = DryRun()
        self.no_candidate = 0
        self._encoding = encoding
        self._limits = limits
        self._judge_limits = judge_limits
        self._clock = LogClock(window)
        self._stops = window.stops()
        self._max_uncommitted = max_uncommitted
        self._assemblies: dict[Partition, TraceAssembly] = {}
        self._offsets: dict[Partition, PartitionOffsets] = {}

    @property
    def counts(self) -> AssemblyCounts:
        """The partitions' assembly counts, added up."""
        return sum((a.counts for a in self._assemblies.values()), AssemblyCounts())

    def open_on(self, tp: Partition) -> int:
        """Traces being assembled on one partition."""
        assembly = self._assemblies.get(tp)
        return 0 if assembly is None else assembly.open_count

    def read(self, tp: Partition, records: Sequence[Record]) -> None:
        """Assemble a partition's fetched records, in offset order."""
        if tp not in self._assemblies:
            self._assemblies[tp] = TraceAssembly(self._limits, self._stops[tp])
            self._offsets[tp] = PartitionOffsets()
        assembly, offsets = self._assemblies[tp], self._offsets[tp]
        for record in records:
            offsets.add(record.offset)
            now = self._clock.arrival(tp, record.offset, record.timestamp)
            self._classify(tp, assembly.due(now))
            try:
                decoded = decode_otlp(record.value or b"", self._encoding)
            except DecodeError:
                if record.offset < self._stops[tp]:  # past it: not the window's record
                    self.dry.dead_lettered += 1
                offsets.done(record.offset)
                continue
            for done in assembly.add(record.offset, decoded, now):
                offsets.done(done)

    def close_due(self) -> None:
        """Close what is due by each partition's present (all, once read to its end), or
        early where the replay's reading would stall."""
        for tp, assembly in self._assemblies.items():
            self._classify(tp, assembly.due(self._clock.now(tp)))
        while 0 < self._open_traces() >= self._limits.max_open_traces:
            for tp, assembly in self._assemblies.items():
                self._classify(tp, assembly.close_next())
        if sum(o.uncommitted for o in self._offsets.values()) >= self._max_uncommitted:
            for tp, assembly in self._assemblies.items():
                self._classify(tp, assembly.close_all())

    def watermarks(self) -> dict[Partition, int]:
        """Each partition's lowest record not done (every record below it is accounted for),
        noted as committed."""
        marks = {}
        for tp, offsets in self._offsets.items():
            if (mark := offsets.watermark()) is not None:
                offsets.committed(mark)
                marks[tp] = mark
        return marks

    def _open_traces(self) -> int:
        return sum(assembly.open_count for assembly in self._assemblies.values())

    def _classify(self, tp: Partition, closed: list[ClosedTrace]) -> None:
        for trace in closed:
            found = candidate(trace)
            if found == "no_candidate":
                self.no_candidate += 1
            elif found == "empty_answer":
                self.dry.skipped += 1
            else:
                self.dry.would_judge += 1
                request = build_request(found.trace, self._judge_limits)
                self.dry.estimated_tokens += request.estimated_tokens
            for done in self._assemblies[tp].finished(trace.trace_id):
                self._offsets[tp].done(done)
