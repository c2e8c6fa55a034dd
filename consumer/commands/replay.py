"""``groundedness replay``: judge one time window of a topic again, outside any consumer group.

The window is a range of offsets per partition: from the first record at or after ``--from``
(``offsets_for_times``) up to, not including, the first record at or after ``--to`` (or the
end offsets read when the replay starts; records produced later are not replayed). A
consumer with no group (``assign`` + ``seek``) reads it, so the live ``CONSUMER_GROUP``'s
offsets never move. The real ``Pipeline`` judges it (same judge, limits, dead letters and
producer as ``run``) through the adapters in ``replay_window.py``: the pipeline sees only
the window's records, and its commit callable records watermarks and stops the replay once every
record of the window has its outcome acknowledged. A dry run reads the same window and only
classifies records, without judging or publishing.

A span topic (``TRACES_FORMAT=otlp_proto|otlp_json``) replays the traces whose first span is in
the window, judged whole: past ``--to`` each partition is read on (up to its end offset when
the replay started) until the traces opened in the window have closed, and time is the log's,
so they close as the live worker would have closed them (``replay_spans.py``). Its dry run
goes through the same pipeline with a judge that only counts and a sink that sends nothing.

Verdict ids are deterministic, so replaying a window again overwrites rather than multiplies.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from consumer import wiring
from consumer.commands.progress import Reporter
from consumer.commands.replay_spans import LogClock, SpanDryRun
from consumer.commands.replay_summary import (
    DEFAULT_PRICE_PER_MILLION_TOKENS,
    DryRun,
    RecordingSink,
    SpanWindow,
    Tally,
    summarise,
)
from consumer.commands.replay_window import Window, WindowConsumer
from consumer.errors import ConfigError
from consumer.evaluate import Evaluator
from consumer.judge.prompt import Limits
from consumer.settings import Settings
from consumer.stream import aiokafka_compat
from consumer.stream.partitions import Partition
from consumer.stream.pipeline import Pipeline
from consumer.stream.sink import VerdictSink

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
    price_per_million_tokens: float = DEFAULT_PRICE_PER_MILLION_TOKENS

    def describe(self, complete: bool) -> dict[str, Any]:
        """The fields that lead the summary."""
        return {
            "topic": self.topic,
            "from": self.start.isoformat(),
            "to": self.end.isoformat() if self.end else None,
            "dry_run": self.dry_run,
            "complete": complete,
        }


async def plan(
    consumer: AIOKafkaConsumer, topic: str, start_ms: int, end_ms: int | None
) -> dict[Partition, tuple[int, int, int]]:
    """Each partition's ``(start, stop, end)``: the window is ``[start, stop)``; ``end`` is its
    end offset now (a span topic reads on to it while the window's traces are open)."""
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
    firsts = await consumer.offsets_for_times({tp: start_ms for tp in partitions})
    lasts = (
        await consumer.offsets_for_times({tp: end_ms for tp in partitions})
        if end_ms is not None
        else {}
    )

    def first_at(found: Any, tp: Partition) -> int:
        return int(found.offset) if found is not None else int(ends[tp])

    return {
        tp: (first_at(firsts[tp], tp), first_at(lasts.get(tp), tp), int(ends[tp]))
        for tp in partitions
    }


async def replay(settings: Settings, request: ReplayRequest) -> dict[str, Any]:
    """Replay the window; returns the summary (``complete`` is False if stopped early)."""
    if request.end is not None and request.end <= request.start:
        raise ConfigError("--to must be later than --from")
    # Checked before any Kafka client exists, as for `run`; a dry run never calls the judge.
    evaluator = None if request.dry_run else wiring.make_evaluator(settings)
    stop = asyncio.Event()
    if threading.current_thread() is threading.main_thread():
        wiring.install_signal_handlers(stop)
    aiokafka_compat.install()
    reader = wiring.create_reader(settings)
    try:
        await wiring.start(reader, settings, "replay reader")
        end_ms = epoch_ms(request.end) if request.end else None
        bounds = await plan(reader, request.topic, epoch_ms(request.start), end_ms)
        span_topic = settings.traces_format != "trace_json"
        window = Window({tp: (first, past) for tp, (first, past, _) in bounds.items()}, stop,
                        ends={tp: end for tp, (_, _, end) in bounds.items()} if span_topic
                        else None)
        reader.assign(list(bounds))
        for tp, offset in window.starts().items():
            reader.seek(tp, offset)
        parked = [tp for tp in bounds if window.is_parked(tp)]
        if parked:
            reader.pause(*parked)
        log.info("replay_starting", topic=request.topic, partitions=len(bounds),
                 offsets=window.total, dry_run=request.dry_run)
        started = time.monotonic()
        with Reporter("replay", window.total) as progress:
            window.on_progress = progress.update
            window.check()
            if span_topic:
                summary = await _replay_spans(settings, request, window, reader, evaluator,
                                              started)
                progress.update(window.completed)
                return summary
            if evaluator is None:
                dry = await _dry_run(
                    WindowConsumer(reader, window), window, wiring.limits(settings)
                )
                progress.update(window.completed)
                records = dry.would_judge + dry.skipped + dry.dead_lettered
                return summarise(
                    request.describe(window.complete), records,
                    time.monotonic() - started, Counter(), dry=dry,
                    price_per_million_tokens=request.price_per_million_tokens,
                )
            tally = Tally()
            outcomes = (await _judge(settings, window, reader, evaluator, tally)).outcomes
            progress.update(window.completed)
        # Every record read gets exactly one outcome, so once complete this counts them all.
        records = sum(outcomes.values())
        return summarise(
            request.describe(window.complete), records, time.monotonic() - started,
            outcomes, tally,
        )
    finally:
        try:
            await reader.stop()
        except KafkaError as exc:
            log.warning("replay_reader_stop_failed", error=str(exc))
        if evaluator is not None:
            await evaluator.judge.close()


async def _judge(
    settings: Settings, window: Window, reader: AIOKafkaConsumer, evaluator: Evaluator,
    tally: Tally,
) -> Pipeline:
    producer = wiring.create_producer(settings)
    try:  # from before the start: a producer that failed to start is closed too
        await wiring.start(producer, settings, "producer")
        sink = RecordingSink(wiring.verdict_sink(settings, producer), tally)
        return await _run_pipeline(settings, window, reader, evaluator, sink)
    finally:
        await producer.stop()


async def _run_pipeline(
    settings: Settings, window: Window, reader: AIOKafkaConsumer, evaluator: Evaluator,
    sink: VerdictSink,
) -> Pipeline:
    consumer = WindowConsumer(reader, window)
    pipeline = Pipeline(consumer, sink, evaluator, window.commit,
                        wiring.pipeline_config(settings))
    if pipeline.span_path is not None:  # the log's time; traces open only inside the window
        pipeline.span_path.read_log(LogClock(window), window.stops())
        consumer.open_traces = pipeline.span_path.open_on
        consumer.on_held_fetch = pipeline.span_path.close_stalled
    # No group, so no rebalance listener: give the pipeline its partitions' state here.
    await pipeline.on_partitions_assigned(window.starts().keys())
    await pipeline.run(window.stop)
    return pipeline


async def _replay_spans(
    settings: Settings, request: ReplayRequest, window: Window, reader: AIOKafkaConsumer,
    evaluator: Evaluator | None, started: float,
) -> dict[str, Any]:
    """A span topic's window: judged through the pipeline, or (a dry run) only assembled."""
    tally, outcomes, dry = Tally(), Counter[str](), None
    if evaluator is None:
        assert settings.traces_format != "trace_json"  # noqa: S101 - the caller checked
        spans = SpanDryRun(settings.traces_format, wiring.assembly_limits(settings),
                           wiring.limits(settings), window, wiring.max_uncommitted_spans(settings))
        consumer = WindowConsumer(reader, window)
        consumer.open_traces = spans.open_on
        await _dry_run_spans(consumer, window, spans)
        dry, counts = spans.dry, spans.counts
        outcomes.update(no_candidate=spans.no_candidate)
    else:
        pipeline = await _judge(settings, window, reader, evaluator, tally)
        assert pipeline.span_path is not None  # noqa: S101 - the settings name a span format
        outcomes, counts = pipeline.outcomes, pipeline.span_path.counts
    return summarise(
        request.describe(window.complete), window.records, time.monotonic() - started,
        outcomes, tally, dry=dry, price_per_million_tokens=request.price_per_million_tokens,
        spans=SpanWindow(counts, outcomes["no_candidate"], window.read_on),
    )


async def _dry_run_spans(consumer: WindowConsumer, window: Window, spans: SpanDryRun) -> None:
    while not window.stop.is_set():
        batches = await consumer.getmany(timeout_ms=200, max_records=500)
        for tp, records in batches.items():
            spans.read(tp, records)
        spans.close_due()
        await window.commit(spans.watermarks())


async def _dry_run(consumer: WindowConsumer, window: Window, limits: Limits) -> DryRun:
    dry = DryRun()
    while not window.stop.is_set():
        batches = await consumer.getmany(timeout_ms=200, max_records=500)
        for tp, records in batches.items():
            for record in records:
                dry.add(record, limits)
            await window.commit({tp: records[-1].offset + 1})
    return dry
