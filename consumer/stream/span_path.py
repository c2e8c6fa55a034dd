"""The span formats' way (``TRACES_FORMAT=otlp_proto|otlp_json``): records -> each partition's
trace assembly -> one task per closed trace -> verdict -> the offsets it held done.

The commit order of ``pipeline.py`` holds with one change, which ``TraceAssembly`` tracks: a
record's offset is done once every trace it fed kept spans to is finished (its verdict
acknowledged, or it got none). So the watermark never passes the first record of an open
trace, and whoever reads the partition next (after a revoke or a restart) reassembles it.

Records are decoded and added in the fetch loop, in offset order (the assembly needs that;
decoding is CPU only). Closing is by time alone, in a timer independent of fetching: a
paused worker (assembly or window full) still closes its traces by their max wait, and their
outcomes free it, so the pause cannot deadlock. A closed trace is judged in its own task,
kept in the pipeline's per-partition task set, so a revoke and the drain wait for it or
cancel it as they do a record's task. The drain stops the timer first: open traces are not
judged early; their records stay uncommitted and are reassembled after the restart.

A bug met while mapping or judging a closed trace still gives it an acknowledged outcome
before it is finished: an ``error`` verdict of type ``internal_error``, so no record is
committed without one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Hashable, Sequence
from typing import Any

import structlog

from consumer.errors import DecodeError
from consumer.evaluate import Evaluation, Evaluator
from consumer.judge.result import TraceFailed
from consumer.ops import metrics
from consumer.stream.offsets import OffsetTracker, PartitionOffsets
from consumer.stream.partitions import Partition
from consumer.stream.record_path import RecordPath, internal_error
from consumer.stream.sink import Record
from consumer.telemetry.assembly import AssemblyLimits, ClosedTrace, TraceAssembly
from consumer.telemetry.conventions import map_trace
from consumer.telemetry.otlp import OtlpEncoding, decode_otlp
from consumer.verdicts import Context, TraceOrigin, errored
from schemas.trace import TraceEvent
from schemas.verdict import Source, Truncation

log = structlog.get_logger(__name__)

TIMER_MAX_SLEEP_S = 0.2  # bounds the delay of a trace that opened while the timer slept
TIMER_MIN_SLEEP_S = 0.005
INTERNAL_ERROR = "internal_error"  # the error verdict's type for a bug met on a trace's way

Tasks = dict[Hashable, set[asyncio.Task[None]]]


class SpanPath:
    """The owned partitions' assemblies, the closing timer, and the closed traces' tasks."""

    def __init__(
        self,
        records: RecordPath,
        evaluator: Evaluator,
        encoding: OtlpEncoding,
        limits: AssemblyLimits,
        tracker: OffsetTracker[Hashable],
        tasks: Tasks,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._records = records
        self._evaluator = evaluator
        self._encoding = encoding
        self.limits = limits
        self._tracker = tracker  # the pipeline's: offsets are marked done here
        self._tasks = tasks  # the pipeline's: revoke and drain wait for these
        self._clock = clock
        self._assemblies: dict[Hashable, TraceAssembly] = {}  # the partitions being closed
        self._leaving: dict[Hashable, TraceAssembly] = {}  # revoked, their tasks finishing
        self._timer: asyncio.Task[None] | None = None

    @property
    def open_traces(self) -> int:
        """Traces being assembled, over every owned partition."""
        return sum(assembly.open_count for assembly in self._assemblies.values())

    @property
    def full(self) -> bool:
        """``MAX_OPEN_TRACES`` reached over the worker's partitions: pause fetching."""
        return self.open_traces >= self.limits.max_open_traces

    # -- partitions ------------------------------------------------------------------------

    def assigned(self, tp: Partition) -> None:
        """Start assembling the partition (from its committed offset)."""
        self._leaving.pop(tp, None)
        self._assemblies.setdefault(tp, TraceAssembly(self.limits))

    def stop_closing(self, revoked: Collection[Partition]) -> None:
        """Close no more of these partitions' traces; those already closed still finish."""
        for tp in revoked:
            if (assembly := self._assemblies.pop(tp, None)) is not None:
                self._leaving[tp] = assembly

    def forget(self, tp: Partition) -> None:
        """Drop the partition's traces: nothing more is done; the next owner reassembles."""
        for held in (self._assemblies, self._leaving):
            if (assembly := held.pop(tp, None)) is not None:
                assembly.drop_all()

    # -- records (in the fetch loop, in offset order) ----------------------------------------

    def accept(self, tp: Partition, offsets: PartitionOffsets, records: Sequence[Record]) -> None:
        """Track, decode and assemble fetched records; dead-letter the undecodable ones."""
        assembly = self._assemblies.get(tp)
        if assembly is None:  # not handed over (or revoking): the caller checked; be safe
            assembly = self._assemblies[tp] = TraceAssembly(self.limits)
        now = self._clock()
        for record in records:
            offsets.add(record.offset)
            try:
                decoded = decode_otlp(record.value or b"", self._encoding)
                done = assembly.add(record.offset, decoded, now)
            except DecodeError as exc:
                self._spawn(tp, self._dead_letter(tp, offsets, record, exc.reason, True))
                continue
            except Exception as exc:  # a bug must not stall the partition: park the record
                log.exception("record_failed", partition=record.partition, offset=record.offset)
                self._spawn(tp, self._dead_letter(tp, offsets, record, internal_error(exc), False))
                continue
            for offset in done:
                offsets.done(offset)

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
            now = self._clock()
            try:
                self.close_due(now)
            except Exception:  # a bug must not stop every partition's closing for good
                log.exception("trace_timer_failed")
            due = [a.next_due_at() for a in self._assemblies.values()]
            nearest = min((at for at in due if at is not None), default=None)
            wait = TIMER_MAX_SLEEP_S if nearest is None else nearest - now
            await asyncio.sleep(min(max(wait, TIMER_MIN_SLEEP_S), TIMER_MAX_SLEEP_S))

    def close_due(self, now: float) -> int:
        """Close the traces ready at ``now`` and start judging each; return how many."""
        started = 0
        for tp, assembly in list(self._assemblies.items()):
            offsets = self._tracker.current(tp)
            if offsets is None:
                continue
            for closed in assembly.due(now):
                self._spawn(tp, self._judge(tp, offsets, assembly, closed))
                started += 1
        return started

    # -- one closed trace -------------------------------------------------------------------

    async def _judge(
        self, tp: Partition, offsets: PartitionOffsets, assembly: TraceAssembly,
        closed: ClosedTrace,
    ) -> None:
        bound = log.bind(topic=tp.topic, partition=tp.partition, trace_id=closed.trace_id,
                         offset=closed.first_offset)
        # Step 1: the trace's outcome, acknowledged: its verdict, or none due.
        try:
            await self._outcome(tp, closed, bound)
        except Exception as exc:  # a bug must not hold the partition's watermark for good
            bound.exception("trace_failed")
            # Step 2: nor let its records be committed without an outcome: an error verdict,
            # published until acknowledged like any other. Only if even that fails (a bug in
            # building or sending it) is the trace finished with none, counted "failed".
            try:
                await self._records.publish(self._failure(tp, closed, exc), bound)
            except Exception:
                bound.exception("trace_error_unpublished")
                self._records.outcomes["failed"] += 1
        # Step 3: the records it held may now be done; a completion for a partition revoked
        # (and maybe re-assigned) meanwhile is dropped.
        done = assembly.finished(closed.trace_id)
        if self._tracker.current(tp) is offsets:
            for offset in done:
                offsets.done(offset)

    async def _outcome(self, tp: Partition, closed: ClosedTrace, bound: Any) -> None:
        mapped = map_trace(closed.spans)
        if mapped is None:  # no LLM call, and no answer with documents: nothing to judge
            self._records.outcomes["no_candidate"] += 1
            bound.debug("trace_not_judged", reason="no candidate", spans=len(closed.spans))
            return
        if not mapped.has_answer:
            metrics.SKIPPED.inc()
            self._records.outcomes["skipped"] += 1
            bound.debug("trace_skipped", reason="empty answer")
            return
        origin = TraceOrigin(
            span_id=mapped.answer_span_id,
            project_id=mapped.project_id,
            session_id=mapped.session_id,
            context_source=mapped.context_source,
            spans=len(closed.spans),
            root_seen=closed.root_seen,
            closed_by=closed.closed_by,
        )
        # The trace's first record: under exactly once its verdict is held until the
        # watermark passes that record, which it does only once this trace is finished.
        source = Source(topic=tp.topic, partition=tp.partition, offset=closed.first_offset)
        evaluation = await self._evaluator.evaluate(
            mapped.to_trace_event(), source=source, origin=origin
        )
        await self._records.publish(evaluation, bound)

    def _failure(self, tp: Partition, closed: ClosedTrace, exc: Exception) -> Evaluation:
        """The ``error`` verdict on a trace an internal error stopped (mapping or judging)."""
        # Only the trace id is known for sure: mapping itself may be what failed.
        trace = TraceEvent(trace_id=closed.trace_id)
        message = f"{type(exc).__name__}: {exc}".splitlines()[0]
        failed = TraceFailed(kind=INTERNAL_ERROR, message=message, usage=None, latency_ms=0,
                             attempts=0)
        source = Source(topic=tp.topic, partition=tp.partition, offset=closed.first_offset)
        evaluator = self._evaluator
        ctx = Context(evaluator.judge.model, evaluator.threshold, Truncation(), source,
                      evaluator.secrets)
        return Evaluation(errored(trace, failed, ctx), failed)

    def _spawn(self, tp: Partition, work: Any) -> None:
        tasks = self._tasks.setdefault(tp, set())
        task: asyncio.Task[None] = asyncio.create_task(work)
        tasks.add(task)
        task.add_done_callback(tasks.discard)
