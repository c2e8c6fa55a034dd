"""A replay's passes over its window: the window's offsets read once (``open_reading``), and
each pass over them (``run_pass``) judging, or counting for a dry run, exactly those records.

``groundedness replay`` makes one pass (``command.py``); ``--batch`` makes two, one collecting
the judge's requests and one publishing the Batch API's answers (``batch/command.py``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import structlog

from consumer import wiring
from consumer.cost.pricing import DEFAULT_PRICE_PER_MILLION_TOKENS
from consumer.cost.verdict_tally import Tally
from consumer.errors import ConfigError
from consumer.inputs.formats import SpanFormat, input_format
from consumer.kafka import compat as aiokafka_compat
from consumer.kafka import copartitioned
from consumer.kafka.partitions import Partition
from consumer.kafka.types import AIOKafkaConsumer, TopicPartition
from consumer.ops.progress import Reporter
from consumer.pipeline.delivery.sink import RecordingSink, VerdictSink
from consumer.pipeline.pipeline import Pipeline
from consumer.pipeline.progress import Commitment
from consumer.pipeline.spans import ClosedTraces
from consumer.replay.dry_run import (
    DryRun,
    NullSink,
    TraceCounter,
)
from consumer.replay.spans import read_log
from consumer.replay.summary import SpanWindow, summarise
from consumer.replay.window import Window, WindowConsumer
from consumer.rules.rule_set import RuleSet
from consumer.settings import Settings

log = structlog.get_logger(__name__)


def parse_instant(text: str, option: str) -> datetime:
    """An ISO 8601 date or date-time; without a zone it is UTC."""
    try:
        instant = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"{option}: {text!r} is not an ISO 8601 date-time (e.g. 2024-05-01T12:00:00Z)"
        ) from None
    return instant if instant.tzinfo is not None else instant.replace(tzinfo=UTC)


def epoch_ms(instant: datetime) -> int:
    """Milliseconds since the epoch, as Kafka timestamps count."""
    return int(instant.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """What to replay, and how."""

    topic: str
    start: datetime
    end: datetime | None
    dry_run: bool = False
    # The dry run's estimate without JUDGE_PRICE_*: every estimated token at this price.
    price_per_million_tokens: float = DEFAULT_PRICE_PER_MILLION_TOKENS
    batch: bool = False  # the judge's requests through the Batch API (``batch/command.py``)
    batch_state: Path | None = None  # its state file; None: named after the window, here

    def describe(self, complete: bool) -> dict[str, Any]:
        """The fields that lead the summary."""
        return {
            "topic": self.topic,
            "from": self.start.isoformat(),
            "to": self.end.isoformat() if self.end else None,
            "dry_run": self.dry_run,
            "complete": complete,
        }


class Bounds(NamedTuple):
    """One partition's offsets: the window is ``[start, stop)``; a span topic reads from
    ``lead`` (its lead-in) and on to ``end`` (its end offset when the replay started) while the
    window's traces are open."""

    lead: int
    start: int
    stop: int
    end: int


async def plan(
    consumer: AIOKafkaConsumer, topic: str, start_ms: int, end_ms: int | None,
    lead_ms: int | None = None,
) -> dict[Partition, Bounds]:
    """Each partition's ``Bounds``; ``lead_ms``: where a span topic's lead-in starts."""
    # Asked of the whole cluster first: a metadata request naming a missing topic could
    # auto-create it.
    if topic not in await consumer.topics():
        raise ConfigError(f"topic {topic!r} does not exist on the cluster")
    await aiokafka_compat.load_topic(consumer, topic)
    numbers = consumer.partitions_for_topic(topic)
    if not numbers:
        raise ConfigError(f"topic {topic!r} has no partitions in the cluster metadata")
    partitions = [TopicPartition(topic, number) for number in sorted(numbers)]
    ends = await consumer.end_offsets(partitions)

    async def first_at(ms: int | None) -> dict[Partition, int]:
        """Each partition's first offset with a timestamp at or after ``ms`` (else its end)."""
        if ms is None:
            return {tp: int(ends[tp]) for tp in partitions}
        found = await consumer.offsets_for_times({tp: ms for tp in partitions})
        return {tp: int(ends[tp]) if found[tp] is None else int(found[tp].offset)
                for tp in partitions}

    starts, stops = await first_at(start_ms), await first_at(end_ms)
    leads = await first_at(lead_ms) if lead_ms is not None else starts
    return {tp: Bounds(min(leads[tp], starts[tp]), starts[tp], stops[tp], int(ends[tp]))
            for tp in partitions}



@dataclass(frozen=True, slots=True)
class Reading:
    """A replay's reader and its window's offsets, read once: every pass over the window (a
    batch replay makes two) reads exactly these records."""

    reader: AIOKafkaConsumer
    bounds: dict[Partition, Bounds]
    started_at: float  # the present at the end offsets plan() read (seconds since the epoch)
    interrupted: asyncio.Event  # set by SIGTERM or SIGINT: every pass stops
    span_topic: bool


@asynccontextmanager
async def open_reading(settings: Settings, request: ReplayRequest) -> AsyncIterator[Reading]:
    """A started group-less reader and the window's ``Bounds``; the reader stops on exit."""
    interrupted = asyncio.Event()
    if threading.current_thread() is threading.main_thread():
        wiring.install_signal_handlers(interrupted)
    aiokafka_compat.install()
    async with wiring.running_reader(wiring.create_reader(settings), settings,
                                     "replay reader") as reader:
        span_topic = isinstance(input_format(settings.traces_format), SpanFormat)
        start_ms = epoch_ms(request.start)
        end_ms = epoch_ms(request.end) if request.end else None
        # A span topic's lead-in: a trace begun up to its max wait before --from may still be
        # open at --from, and is not the window's.
        lead_ms = (max(0, start_ms - int(settings.trace_max_wait_seconds * 1000))
                   if span_topic else None)
        started_at = time.time()  # the present at the end offsets plan() reads now
        bounds = await plan(reader, request.topic, start_ms, end_ms, lead_ms)
        if span_topic and (logs := settings.otlp_logs_topic) is not None:
            # The same window of the logs topic: its records join the spans' traces, pair by
            # pair of partition numbers, as in ``run``.
            bounds |= await plan(reader, logs, start_ms, end_ms, lead_ms)
            await copartitioned.check(reader, [request.topic, logs])
        yield Reading(reader, bounds, started_at, interrupted, span_topic)


def open_window(reading: Reading) -> Window:
    """A new ``Window`` over the reading's bounds, the reader assigned and set at its start
    (again, for a second pass)."""
    bounds, reader, spans = reading.bounds, reading.reader, reading.span_topic
    window = Window(
        {tp: (b.start, b.stop) for tp, b in bounds.items()}, asyncio.Event(),
        ends={tp: b.end for tp, b in bounds.items()} if spans else None,
        leads={tp: b.lead for tp, b in bounds.items()} if spans else None,
    )
    reader.assign(list(bounds))  # a new assignment: positions and pauses start afresh
    for tp, offset in window.leads().items():
        reader.seek(tp, offset)
    parked = [tp for tp in bounds if window.is_parked(tp)]
    if parked:
        reader.pause(*parked)
    return window


async def run_pass(
    settings: Settings, request: ReplayRequest, reading: Reading, rules: RuleSet, *,
    dry: DryRun | None = None, wrap_sink: Callable[[VerdictSink], VerdictSink] | None = None,
    what: str = "replay", log_context: dict[str, Any] | None = None,
    started: float | None = None,
) -> dict[str, Any]:
    """One pass over the window with ``rules``: judged and published (through
    ``wrap_sink(sink)`` if given), or counted by ``dry``; its summary. ``what`` names the
    progress lines; ``started`` (monotonic) is when the replay began, for ``elapsed_s``."""
    window = open_window(reading)
    # A stop asked for now or later ends this pass (its window's stop is the pipeline's).
    forward = asyncio.create_task(_forward(reading.interrupted, window.stop))
    try:
        log.info(f"{what}_starting", topic=request.topic, partitions=len(reading.bounds),
                 offsets=window.total, dry_run=request.dry_run)
        started = time.monotonic() if started is None else started
        with Reporter(what, window.total) as progress, \
                structlog.contextvars.bound_contextvars(**(log_context or {})):
            window.on_progress = progress.update
            window.check()
            if reading.span_topic:
                summary = await _replay_spans(settings, request, window, reading, rules, dry,
                                              started, wrap_sink)
                progress.update(window.completed)
                return summary
            if dry is not None:
                await _dry_run(WindowConsumer(reading.reader, window), window, dry)
                progress.update(window.completed)
                return summarise(
                    request.describe(window.complete), window.records,
                    time.monotonic() - started, Counter(), settings.rules, dry=dry,
                )
            tally = Tally()
            outcomes = (await _judge(settings, window, reading, rules, tally,
                                     wrap_sink)).outcomes
            progress.update(window.completed)
        # The window's records read, each with one outcome once complete. Not the outcomes'
        # sum: a trace's verdicts (one per rule that applies) are one record's outcome.
        return summarise(
            request.describe(window.complete), window.records, time.monotonic() - started,
            outcomes, rules.names, tally,
        )
    finally:
        forward.cancel()


async def _forward(interrupted: asyncio.Event, stop: asyncio.Event) -> None:
    await interrupted.wait()
    stop.set()


async def _judge(
    settings: Settings, window: Window, reading: Reading, rules: RuleSet, tally: Tally,
    wrap_sink: Callable[[VerdictSink], VerdictSink] | None = None,
) -> Pipeline:
    producer = wiring.create_producer(settings)
    try:  # from before the start: a producer that failed to start is closed too
        await wiring.start(producer, settings, "producer")
        sink: VerdictSink = RecordingSink(wiring.verdict_sink(settings, producer), tally)
        if wrap_sink is not None:
            sink = wrap_sink(sink)
        return await _run_pipeline(settings, window, reading.reader, rules, sink,
                                   reading.started_at)
    finally:
        await producer.stop()


async def _run_pipeline(
    settings: Settings, window: Window, reader: AIOKafkaConsumer, rules: RuleSet,
    sink: VerdictSink, started_at: float, traces: ClosedTraces | None = None,
) -> Pipeline:
    consumer = WindowConsumer(reader, window)
    pipeline = Pipeline(consumer, sink, rules, window.commit,
                        wiring.pipeline_config(settings))
    if pipeline.span_path is not None:
        read_log(pipeline, consumer, window, started_at, traces)
    # No group, so no rebalance listener: give the pipeline its partitions' state here.
    await pipeline.on_partitions_assigned(window.leads().keys())
    await pipeline.run(window.stop)
    return pipeline


async def _replay_spans(
    settings: Settings, request: ReplayRequest, window: Window, reading: Reading,
    rules: RuleSet, dry: DryRun | None, started: float,
    wrap_sink: Callable[[VerdictSink], VerdictSink] | None = None,
) -> dict[str, Any]:
    """A span topic's window through the pipeline: judged, or (a dry run) counted."""
    tally = Tally()
    if dry is not None:
        # The counter takes each closed trace through the rules itself: the pipeline's rules
        # are the same (estimating) ones, never called by it.
        counter = TraceCounter(dry)
        pipeline = await _run_pipeline(settings, window, reading.reader, rules, NullSink(),
                                       reading.started_at, counter)
        no_candidate = counter.no_candidate
        dry.dead_lettered = pipeline.outcomes["dead_lettered"]
    else:
        pipeline = await _judge(settings, window, reading, rules, tally, wrap_sink)
        no_candidate = pipeline.outcomes["no_candidate"]
    span_path = pipeline.span_path
    assert span_path is not None  # noqa: S101 - the settings name a span format
    return summarise(
        request.describe(window.complete), window.records, time.monotonic() - started,
        pipeline.outcomes, settings.rules, tally, dry=dry,
        spans=SpanWindow(span_path.counts, no_candidate, window.read_on),
    )


async def _dry_run(consumer: WindowConsumer, window: Window, dry: DryRun) -> None:
    """A trace event topic's dry run: each record classified as the pipeline would."""
    while not window.stop.is_set():
        batches = await consumer.getmany(timeout_ms=200, max_records=500)
        for tp, records in batches.items():
            for record in records:
                await dry.add(record)
            await window.commit({tp: Commitment(records[-1].offset + 1, "")})
