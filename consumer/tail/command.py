"""``groundedness verdicts``: follow ``VERDICTS_TOPIC``, showing the verdicts that pass the
filters, as a live table or as JSON lines.

It reads outside any consumer group, as ``replay`` does: a consumer with no group id, every
partition assigned by hand, positions set by ``seek``; nothing is ever committed, so it joins
no group (the worker's included), creates none, and moves nobody's offsets. It reads
``read_committed``, as the worker's own consumers do: under ``DELIVERY=exactly_once`` it shows
only verdicts whose transaction committed.

Where it starts, per partition: the end offsets read at start (``from now``, the default: the
verdicts published from then on) or the first offset still in the log (``--from-beginning``).
Where it stops: after ``--limit`` verdicts shown, at the end offsets read at start
(``--until-end``: the records published later are not read), or on SIGINT / SIGTERM. A topic's
partitions are read as of start: one added while it runs is not read.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from enum import Enum

import structlog

from consumer import wiring
from consumer.errors import ConfigError
from consumer.kafka import compat as aiokafka_compat
from consumer.kafka.partitions import Partition
from consumer.kafka.types import AIOKafkaConsumer, TopicPartition
from consumer.settings import Settings
from consumer.tail.display import Display
from consumer.tail.selection import NotAVerdict, Selection, read_verdict

log = structlog.get_logger(__name__)

FETCH_WAIT_MS = 500  # how long one fetch waits for records: a stop is seen within it
FETCH_MAX_RECORDS = 500


class Ended(Enum):
    """Why the reading ended."""

    LIMIT = "limit"  # --limit verdicts shown
    END = "end"  # --until-end: every partition read to its end offset at start
    STOPPED = "stopped"  # SIGINT or SIGTERM


@dataclass(frozen=True, slots=True)
class VerdictsRequest:
    """What to show, from where, until when."""

    selection: Selection
    from_beginning: bool = False
    limit: int | None = None
    until_end: bool = False


async def follow_verdicts(settings: Settings, request: VerdictsRequest,
                          display: Display) -> Ended:
    """Read ``VERDICTS_TOPIC`` into ``display`` until the request says stop, or a signal does."""
    stop = asyncio.Event()
    if threading.current_thread() is threading.main_thread():
        wiring.install_signal_handlers(stop)
    aiokafka_compat.install()
    async with wiring.running_reader(wiring.create_verdict_reader(settings), settings,
                                     "verdicts reader") as reader:
        return await _follow(reader, settings.verdicts_topic, request, display, stop)


async def _follow(reader: AIOKafkaConsumer, topic: str, request: VerdictsRequest,
                  display: Display, stop: asyncio.Event) -> Ended:
    partitions = await _partitions(reader, topic)
    reader.assign(partitions)  # by hand: no group, no rebalance, no commit
    ends = await reader.end_offsets(partitions)
    starts = await reader.beginning_offsets(partitions) if request.from_beginning else ends
    for tp in partitions:
        reader.seek(tp, starts[tp])
    log.info("verdicts_reading", topic=topic, partitions=len(partitions),
             start="beginning" if request.from_beginning else "now",
             until="end" if request.until_end else None, limit=request.limit)
    # --until-end: the partitions not yet read to their end offset at start.
    unread = ({tp for tp in partitions if starts[tp] < ends[tp]} if request.until_end
              else None)
    shown = 0
    while not stop.is_set():
        if unread is not None and not unread:
            return Ended.END
        batch = await reader.getmany(timeout_ms=FETCH_WAIT_MS, max_records=FETCH_MAX_RECORDS)
        for tp in sorted(batch, key=lambda tp: tp.partition):
            for record in batch[tp]:
                if unread is not None and record.offset >= ends[tp]:
                    break  # published after the start: past --until-end's end
                try:
                    verdict = read_verdict(record.value)
                except NotAVerdict as exc:
                    display.skipped(f"partition {tp.partition} offset {record.offset}", str(exc))
                    continue
                if not request.selection.matches(verdict):
                    continue
                display.show(verdict)
                shown += 1
                if request.limit is not None and shown >= request.limit:
                    display.flush()
                    return Ended.LIMIT
        display.flush()
        if unread is not None:
            # The position passes transaction markers, so it is compared, not the last
            # record's offset.
            done = {tp for tp in unread if await reader.position(tp) >= ends[tp]}
            if done:
                reader.pause(*done)  # what it publishes from now on is not wanted
                unread -= done
    return Ended.STOPPED


async def _partitions(reader: AIOKafkaConsumer, topic: str) -> list[Partition]:
    # Asked of the whole cluster first: a metadata request naming a missing topic could
    # auto-create it.
    if topic not in await reader.topics():
        raise ConfigError(f"VERDICTS_TOPIC: topic {topic!r} does not exist on the cluster")
    await aiokafka_compat.load_topic(reader, topic)
    numbers = reader.partitions_for_topic(topic)
    if not numbers:
        raise ConfigError(f"VERDICTS_TOPIC: topic {topic!r} has no partitions in the metadata")
    return [TopicPartition(topic, number) for number in sorted(numbers)]
