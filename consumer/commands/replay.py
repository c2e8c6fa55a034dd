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
from consumer.commands.replay_summary import (
    DEFAULT_PRICE_PER_MILLION_TOKENS,
    DryRun,
    RecordingSink,
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
) -> dict[Partition, tuple[int, int]]:
    """Each partition's ``[start, stop)`` offsets for the window."""
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

    return {tp: (first_at(firsts[tp], tp), first_at(lasts.get(tp), tp)) for tp in partitions}


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
        spans = await plan(reader, request.topic, epoch_ms(request.start), end_ms)
        window = Window(spans, stop)
        reader.assign(list(spans))
        for tp, offset in window.starts().items():
            reader.seek(tp, offset)
        reached = [tp for tp in spans if window.is_reached(tp)]
        if reached:
            reader.pause(*reached)
        log.info("replay_starting", topic=request.topic, partitions=len(spans),
                 offsets=window.total, dry_run=request.dry_run)
        started = time.monotonic()
        with Reporter("replay", window.total) as progress:
            window.on_progress = progress.update
            window.check()
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
            outcomes = await _judge(settings, window, reader, evaluator, tally)
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
) -> Counter[str]:
    producer = wiring.create_producer(settings)
    try:  # from before the start: a producer that failed to start is closed too
        await wiring.start(producer, settings, "producer")
        sink = RecordingSink(wiring.verdict_sink(settings, producer), tally)
        pipeline = Pipeline(WindowConsumer(reader, window), sink, evaluator, window.commit,
                            wiring.pipeline_config(settings))
        # No group, so no rebalance listener: give the pipeline its partitions' state here.
        await pipeline.on_partitions_assigned(window.starts().keys())
        await pipeline.run(window.stop)
        return pipeline.outcomes
    finally:
        await producer.stop()


async def _dry_run(consumer: WindowConsumer, window: Window, limits: Limits) -> DryRun:
    dry = DryRun()
    while not window.stop.is_set():
        batches = await consumer.getmany(timeout_ms=200, max_records=500)
        for tp, records in batches.items():
            for record in records:
                dry.add(record, limits)
            await window.commit({tp: records[-1].offset + 1})
    return dry
