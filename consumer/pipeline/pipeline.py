"""Many records at once on their way from fetch to commit.

The fetch loop only fetches and dispatches: each record becomes a task (decode -> skip,
dead-letter or judge -> publish), so judge calls never block polling and records finish out
of order within and across partitions. Commit order, which is what makes this safe:

1. a record's outcome is acknowledged by the broker (or it was skipped);
2. only then is its offset marked done in the partition's ``PartitionOffsets``;
3. the committed offset is the watermark: the lowest offset not yet done; the commit's
   metadata carries the progress above it (``progress.py``): the records not yet done, and
   for span input the finished traces spread over them.

So nothing below a commit lacks an outcome, and nothing the progress marks done lacks one
either. Whoever reads the partition next (after a crash, a stop or a rebalance) reads it from
the watermark, and skips what the progress marks done (``on_partitions_assigned`` reads it
before any record is dispatched): a graceful hand-over redoes only the work still in flight,
a crash also what finished since the last commit (one ``commit_interval_s``). The records
between fetch and commit are bounded by ``max_uncommitted``; at most ``max_in_flight`` of
them are being worked on (beyond either, the partitions are paused, and re-paused after
every rebalance).

A revoked partition waits for its in-flight work only ``revoke_timeout_s``, well under the
group's rebalance timeout (``clients.REBALANCE_TIMEOUT_MS``), then commits its progress: no
member is expelled for waiting on its own work, and the next owner redoes what was cut.

With ``TRACES_FORMAT=otlp_proto|otlp_json`` records are not judged one by one: they feed
each partition's trace assembly, and closed traces are judged (``spans.py``, which keeps
the same order: an offset is done once every trace it fed is finished). The window then
counts the closed traces being judged as in flight, and also pauses at ``MAX_OPEN_TRACES``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Hashable, Mapping
from dataclasses import dataclass, field

import structlog

from consumer.inputs.formats import TRACE_JSON, EventFormat, Format, SpanFormat
from consumer.kafka.partitions import Consumer, Partition
from consumer.ops import metrics
from consumer.pipeline.delivery.sink import Record, VerdictSink
from consumer.pipeline.offsets import OffsetTracker, PartitionOffsets
from consumer.pipeline.progress import Commitment, Progress, encode
from consumer.pipeline.records import RecordPath
from consumer.pipeline.spans import SpanPath
from consumer.rules.rule_set import RuleSet
from consumer.telemetry.assembly import AssemblyLimits
from consumer.telemetry.clock import FrontierClock, ReadEnds

log = structlog.get_logger(__name__)

# Commits the offsets and progress it is given and returns those that did commit.
Commit = Callable[[dict[Partition, Commitment]], Awaitable[dict[Partition, Commitment]]]
# The progress of the partitions' last commits (a new owner's, before it dispatches).
ReadProgress = Callable[[Collection[Partition]], Awaitable[dict[Partition, Progress]]]
OVERFLOW_LOG_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    """How much the pipeline holds and how long it waits."""

    max_in_flight: int  # records fetched whose outcome is not yet acknowledged
    max_uncommitted: int | None = None  # records between fetch and commit (default: the same)
    drain_timeout_s: float = 45.0
    revoke_timeout_s: float = 10.0  # well under the group's rebalance timeout
    commit_interval_s: float = 0.2
    fetch_timeout_ms: int = 200
    final_commit_timeout_s: float = 5.0  # the drain's last commit, if the broker is away
    input_format: Format = TRACE_JSON  # TRACES_FORMAT: a span format takes the span path
    logs_topic: str | None = None  # OTLP_LOGS_TOPIC: read with the spans, co-partitioned
    assembly: AssemblyLimits = field(default_factory=AssemblyLimits)


class Pipeline:
    """Fetches, dispatches, tracks and commits; see the module docstring for the order."""

    def __init__(
        self,
        consumer: Consumer,
        sink: VerdictSink,
        rules: RuleSet,
        commit: Commit,
        config: PipelineConfig,
        *,
        read_progress: ReadProgress | None = None,
        read_to_end: ReadEnds | None = None,
    ) -> None:
        """``read_progress``: the group's committed progress (None: no group, as a replay);
        ``read_to_end``: whether a partition is read to its end (span time runs on then;
        None: whenever fetching is not paused)."""
        self._consumer = consumer
        self._read_progress = read_progress
        self._rules = rules
        fmt = config.input_format
        self._records = (RecordPath(sink, rules, fmt.decoder()) if isinstance(fmt, EventFormat)
                         else RecordPath(sink, rules))
        self._commit_offsets = commit
        self._config = config
        self._tracker: OffsetTracker[Hashable] = OffsetTracker()
        self._tasks: dict[Hashable, set[asyncio.Task[None]]] = {}
        self._paused = False
        self._held: set[Partition] = set()  # a pair's topic read too far ahead of the other
        self._last_commit = 0.0
        # The fetch loop and the rebalance listener both commit; one at a time (a transaction
        # per partition producer cannot overlap another).
        self._commit_lock = asyncio.Lock()
        self._spans: SpanPath | None = None
        self._overflow_logged_at = -float("inf")
        if isinstance(fmt, SpanFormat):
            ends = read_to_end or (lambda tp: True)
            clock = FrontierClock(lambda tp: not self._paused and ends(tp))
            self._spans = SpanPath(self._records, rules, fmt, config.assembly,
                                   self._tracker, self._tasks, clock,
                                   max_judging=config.max_in_flight,
                                   logs_topic=config.logs_topic)
        self.outcomes = self._records.outcomes  # pass/fail/error/skipped/dead_lettered/...
        self.verdicts_by_rule = self._records.by_rule  # (rule, verdict) -> verdicts
        self.span_path = self._spans  # span formats: a replay sets its time and reads its counts
        self.last_fetch_at: float | None = None  # monotonic; liveness (health/monitor.py)

    # -- the fetch loop -------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Fetch and dispatch until ``stop`` is set, then drain and commit."""
        if self._spans is not None:
            self._spans.start()
        try:
            while not stop.is_set():
                # While the broker is down, a commit (looking for the group coordinator) or a
                # fetch (waiting out a rejoin) waits for it indefinitely inside aiokafka; a
                # SIGTERM must not wait with them, so either step is abandoned on ``stop``.
                if not await _unless_stopped(self._fetch_and_commit(), stop):
                    break
        finally:
            await asyncio.shield(self._drain())

    async def _fetch_and_commit(self) -> None:
        await self._fetch_once()
        self._hold_ahead()
        await self.commit(force=False)

    def _hold_ahead(self) -> None:
        """Pause a pair's topic that is read too far ahead of the other (``SpanPath.ahead``):
        its traces would wait open for the other's records, up to MAX_OPEN_TRACES."""
        if self._spans is None or self._config.logs_topic is None:
            return
        ahead = self._spans.ahead(self._owned())
        if ahead == self._held:
            return
        if held := ahead - self._held:
            self._consumer.pause(*held)
            log.info("partitions_held_ahead", partitions=sorted(str(tp) for tp in held))
        released = [tp for tp in self._held - ahead if tp in self._consumer.assignment()]
        self._held = ahead
        if released and not self._paused:
            self._consumer.resume(*released)

    def _room(self) -> int:
        """How many more records may be fetched (0 or less: pause)."""
        in_flight = self._tracker.in_flight
        if self._spans is not None:
            # Records held by open traces are not being worked on: only the closed traces
            # being judged (and dead letters being sent) are. Open traces are bounded by
            # closing the oldest at MAX_OPEN_TRACES, not by pausing (``SpanPath``).
            in_flight = sum(len(tasks) for tasks in self._tasks.values())
        return min(
            self._config.max_in_flight - in_flight,
            (self._config.max_uncommitted or self._config.max_in_flight)
            - self._tracker.uncommitted,
        )

    async def _fetch_once(self) -> None:
        room = self._room()
        self._apply_backpressure(room)
        if self._paused and self._spans is not None:
            self._spans.close_stalled()  # a full window that nothing else would empty
        batches = await self._consumer.getmany(
            timeout_ms=self._config.fetch_timeout_ms, max_records=max(room, 1)
        )
        self.last_fetch_at = time.monotonic()
        spans: dict[Partition, tuple[PartitionOffsets, list[Record]]] = {}
        for tp, records in batches.items():
            offsets = self._tracker.current(tp)
            if offsets is None:
                # Fetched before the partition was handed over (aiokafka fetches as soon as
                # partitions are assigned; exactly once, its producer may still be starting):
                # put the records back and pause it until ``on_partitions_assigned``, so no
                # record is handled before the partition's state (and its fencing producer)
                # exists, and the loop does not fetch the same records over and over.
                self._consumer.seek(tp, records[0].offset)
                self._consumer.pause(tp)
                continue
            if self._spans is not None:
                spans[tp] = (offsets, records)
                continue
            tasks = self._tasks.setdefault(tp, set())
            for record in records:
                if not metrics.taken(offsets.take(record.offset)):
                    continue  # its previous owner finished it (the commit's progress)
                task = asyncio.create_task(self._handle(tp, offsets, record))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        if self._spans is not None and spans:
            # A pair's topic read too far ahead of the other's records is put back, and held
            # until the other nears (``SpanPath.accept_batch``, ``_hold_ahead``).
            for tp, offset in self._spans.accept_batch(spans).items():
                self._consumer.seek(tp, offset)
                self._consumer.pause(tp)
                self._held.add(tp)
        metrics.IN_FLIGHT.set(self._tracker.uncommitted)

    def _apply_backpressure(self, room: int) -> None:
        # Pause when full, or while the judge is down for everyone (fetching more would only
        # queue work behind the circuit breaker); resume at half full, with hysteresis.
        holding = self._rules.holding
        if (room <= 0 or holding) and not self._paused:
            self._paused = True
            self._consumer.pause(*self._consumer.assignment())
            log.info("partitions_paused", uncommitted=self._tracker.uncommitted, judge_down=holding,
                     open_traces=None if self._spans is None else self._spans.open_traces)
        elif self._paused and not holding and room >= self._config.max_in_flight // 2:
            self._paused = False
            self._consumer.resume(*(tp for tp in self._owned() if tp not in self._held))
            log.info("partitions_resumed", uncommitted=self._tracker.uncommitted)

    async def commit(self, *, force: bool) -> None:
        """Commit every watermark that moved (at most every ``commit_interval_s``).

        A commit that has begun is never abandoned, even when its caller is (a SIGTERM
        cancels the fetch loop's step): once a transaction's ``EndTxn`` is sent, the broker
        commits it whatever the client does next, and only the commit's own completion tells
        the worker which outcomes are published. So the work is shielded, and it records its
        result itself; the drain's final commit queues behind it on the lock. (That wait is
        bounded too: if the broker is away past it, the worker exits without learning the
        commit's fate, and publishes nothing again meanwhile.)
        """
        now = time.monotonic()
        if not force and now - self._last_commit < self._config.commit_interval_s:
            return
        self._last_commit = now
        await asyncio.shield(self._commit_watermarks())

    async def _commit_watermarks(
        self, partitions: Collection[Partition] | None = None, *, event: str = "commit_failed"
    ) -> None:
        """Commit the moved watermarks (of ``partitions``, or all), one commit at a time."""
        async with self._commit_lock:
            # Read under the lock: a commit that finished while this one waited has moved them.
            # Each partition's progress and (exactly once) its held outcomes are taken at
            # this one instant: what finishes while the commit is on its way goes next time.
            commitments: dict[Partition, Commitment] = {}
            snapshots: dict[Partition, int] = {}
            for tp in self._tracker.changed():
                if partitions is not None and tp not in partitions:
                    continue
                if (commitment := self._commitment(tp)) is not None:
                    commitments[tp] = commitment
                    snapshots[tp] = self._tracker.partition(tp).snapshot
            if not commitments:
                return
            try:
                committed = await self._commit_offsets(commitments)
            except Exception as exc:  # a rebalance in progress; the revoke path commits instead
                log.warning(event, error=f"{type(exc).__name__}: {exc}")
                return
            for tp, commitment in committed.items():
                if (offsets := self._tracker.current(tp)) is not None:
                    offsets.committed(commitment.offset, snapshots.get(tp))
        metrics.IN_FLIGHT.set(self._tracker.uncommitted)

    def _commitment(self, tp: Partition) -> Commitment | None:
        """The partition's watermark and progress as a commit; None when the progress does
        not fit the metadata (its last commit stands: more is redone, nothing skipped)."""
        offsets = self._tracker.partition(tp)
        closed = self._spans.closed_keys(tp) if self._spans is not None else ()
        progress = offsets.progress(closed)
        if progress is None:
            return None
        metadata = encode(progress)
        if metadata is None:
            metrics.COMMIT_METADATA_OVERFLOW.inc()
            now = time.monotonic()
            if now - self._overflow_logged_at >= OVERFLOW_LOG_EVERY_S:
                self._overflow_logged_at = now
                log.warning("commit_metadata_overflow", partition=str(tp),
                            watermark=progress.watermark, not_done=progress.reread,
                            closed_traces=len(progress.closed),
                            detail="the partition's last commit stands until its progress fits")
            return None
        metrics.COMMIT_METADATA_BYTES.observe(len(metadata))
        return Commitment(progress.watermark, metadata)

    # -- rebalances (called by the consumer's listener, between fetches) -------------------

    async def on_partitions_revoked(self, revoked: Collection[Partition]) -> None:
        """Stop, wait a bounded time for the partitions' work, commit, forget them."""
        if self._spans is not None:  # no new trace tasks: the wait below covers them all
            self._spans.stop_closing(revoked)
        tasks = [task for tp in revoked for task in self._tasks.get(tp, ())]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self._config.revoke_timeout_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.shield(self._commit_watermarks(revoked, event="revoke_commit_failed"))
        for tp in revoked:
            self._tracker.drop(tp)
            self._tasks.pop(tp, None)
            if self._spans is not None:  # open traces: the next owner reassembles them
                self._spans.forget(tp)
        log.info("partitions_revoked", partitions=sorted(str(tp) for tp in revoked))

    async def on_partitions_assigned(
        self, assigned: Collection[Partition],
        progress: Mapping[Partition, Progress] | None = None,
    ) -> None:
        """Start fresh state from the partitions' committed progress (``progress``, else read
        here) and dispatch from here on; aiokafka forgets pauses on assignment, so re-pause
        if full (and resume one paused while it was handed over)."""
        if progress is None and self._read_progress is not None and assigned:
            progress = await self._read_progress(assigned)
        for tp in assigned:
            inherited = (progress or {}).get(tp)
            self._tracker.partition(tp, inherited)
            if inherited is not None and inherited.fetched_to > inherited.watermark:
                log.info("partition_progress_read", partition=str(tp),
                         committed=inherited.watermark, fetched_to=inherited.fetched_to,
                         reread=inherited.reread,
                         skippable=inherited.fetched_to - inherited.watermark - inherited.reread,
                         closed_traces=len(inherited.closed))
            if self._spans is not None:
                self._spans.assigned(tp)
        if self._spans is not None:
            self._spans.unpaired(self._consumer.assignment())
        if assigned and self._paused:
            self._consumer.pause(*assigned)
        elif assigned:
            self._consumer.resume(*assigned)
        log.info("partitions_assigned", partitions=sorted(str(tp) for tp in assigned))

    async def forget_partition(self, tp: Partition) -> None:
        """Drop a partition's state and in-flight work, committing nothing: its outcomes are
        gone (exactly once, with a lost producer), so it starts over from its committed
        offset when it is handed over again."""
        if tp in self._consumer.assignment():  # pausing a partition no longer owned raises
            self._consumer.pause(tp)
        self._tracker.drop(tp)  # first: a completion still on its way is discarded
        if self._spans is not None:
            self._spans.forget(tp)
        tasks = self._tasks.pop(tp, set())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        log.info("partition_forgotten", partition=str(tp), abandoned=len(tasks))

    def _owned(self) -> list[Partition]:
        """The assigned partitions that were handed over (a partition still starting stays
        paused)."""
        return [tp for tp in self._consumer.assignment() if self._tracker.current(tp) is not None]

    # -- one record (its way is records.py) ---------------------------------------------

    async def _handle(self, tp: Partition, offsets: PartitionOffsets, record: Record) -> None:
        await self._records.handle(record)
        # A completion for a partition revoked (and maybe re-assigned) meanwhile is dropped.
        if self._tracker.current(tp) is offsets:
            offsets.done(record.offset)

    # -- shutdown ---------------------------------------------------------------------------

    async def _drain(self) -> None:
        """Stop fetching, give in-flight work the grace period, commit what finished."""
        # Step 1: fetch nothing more, and close no more traces (open ones are not judged
        # early: their records stay uncommitted, and are reassembled after the restart).
        if self._spans is not None:
            await self._spans.stop()
        assignment = self._consumer.assignment()
        if assignment:
            self._consumer.pause(*assignment)
        # Step 2: let the records in flight reach their outcomes, for at most the grace period.
        tasks = [task for tasks in self._tasks.values() for task in tasks]
        log.info("draining", in_flight=len(tasks), timeout_s=self._config.drain_timeout_s)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self._config.drain_timeout_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            if pending:
                log.warning("drain_timed_out", abandoned=len(pending))
        # Step 3: commit every watermark that moved (after a commit already in flight).
        # Bounded too: with the broker away the commit would wait for it forever, and what
        # it fails to commit is only redelivered (at least once) or re-judged (exactly once).
        final = asyncio.ensure_future(self.commit(force=True))
        await asyncio.wait({final}, timeout=self._config.final_commit_timeout_s)
        if not final.done():
            final.cancel()
            log.warning("final_commit_timed_out", timeout_s=self._config.final_commit_timeout_s)
        log.info("drained", uncommitted=self._tracker.uncommitted)


async def _unless_stopped(work: Awaitable[None], stop: asyncio.Event) -> bool:
    """Await ``work`` unless ``stop`` is set first: then cancel it and return False.

    The cancelled work is not waited for: an aiokafka call may need the broker even to
    unwind (a transaction's abort); the drain that follows bounds everything it waits for.
    """
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        abandoned = not task.done()
        if abandoned:  # stopped (or this loop itself cancelled)
            task.cancel()
    if abandoned:
        return False
    task.result()  # re-raises what the fetch or the commit raised
    return True

