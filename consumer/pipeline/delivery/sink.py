"""Where outcomes go: verdicts to ``VERDICTS_TOPIC``, dead letters to ``DLQ_TOPIC``.

``publish`` and ``dead_letter`` return only once the broker has acknowledged the record
(idempotent producer, ``acks=all``): the caller may then mark the offset done.

Dead letters keep the original value, key and headers, and add these headers:
``dlq.reason`` (one line, at most 300 characters), ``dlq.source.topic``,
``dlq.source.partition``, ``dlq.source.offset``, ``dlq.source.timestamp`` (ms) and
``dlq.worker`` (prompt version). What would not fit in one record is cut, and says so
(``consumer/pipeline/delivery/dead_letters.py``): a dead letter is never refused for its size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from consumer.cost.verdict_tally import Tally
from consumer.errors import PublishError
from consumer.judge.prompt import PROMPT_VERSION
from consumer.kafka.types import AIOKafkaProducer, KafkaError
from consumer.pipeline.delivery.dead_letters import MAX_RECORD_BYTES, DeadLetterRecord, fit
from schemas.verdict import VerdictEvent

Headers = Sequence[tuple[str, bytes]]
MAX_DLQ_REASON_CHARS = 300


class Record(Protocol):
    """The parts of a consumed Kafka record the worker reads."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Headers: ...


class VerdictSink(Protocol):
    """Publishes outcomes; each call returns once the broker acknowledged it."""

    async def publish(self, verdict: VerdictEvent) -> None: ...

    async def dead_letter(self, record: Record, reason: str) -> None: ...


@dataclass(frozen=True, slots=True)
class OutcomeTopics:
    """Where outcomes go: verdicts, and the records that could not be judged."""

    verdicts: str
    dead_letters: str


class KafkaVerdictSink:
    """A ``VerdictSink`` over one idempotent aiokafka producer."""

    def __init__(self, producer: AIOKafkaProducer, topics: OutcomeTopics) -> None:
        self._producer = producer
        self._topics = topics

    async def publish(self, verdict: VerdictEvent) -> None:
        """Send the verdict keyed by its id and wait for the broker's acknowledgement."""
        try:
            delivery = await self._producer.send(
                self._topics.verdicts,
                value=verdict.model_dump_json().encode("utf-8"),
                key=verdict.verdict_id.encode("utf-8"),
            )
            await delivery
        except KafkaError as exc:
            raise PublishError(f"verdict not acknowledged: {type(exc).__name__}: {exc}") from exc

    async def dead_letter(self, record: Record, reason: str) -> None:
        """Send the original bytes with the reason and source coordinates as headers."""
        key, value, headers = dead_letter_record(record, reason)
        try:
            delivery = await self._producer.send(
                self._topics.dead_letters, value=value, key=key, headers=headers
            )
            await delivery
        except KafkaError as exc:
            detail = f"{type(exc).__name__}: {exc}"
            raise PublishError(f"dead letter not acknowledged: {detail}") from exc


def dead_letter_record(record: Record, reason: str) -> DeadLetterRecord:
    """The dead letter's key, value and headers, cut to fit one Kafka record."""
    return fit(record.key, record.value, list(record.headers),
               dead_letter_headers(record, reason), MAX_RECORD_BYTES)


def dead_letter_headers(record: Record, reason: str) -> list[tuple[str, bytes]]:
    """The reason (one line) and where the record came from."""
    line = " ".join(reason.splitlines())  # a header read as one line by every tool
    if len(line) > MAX_DLQ_REASON_CHARS:
        line = line[: MAX_DLQ_REASON_CHARS - 1] + "…"
    return [
        ("dlq.reason", line.encode("utf-8", "replace")),
        ("dlq.source.topic", record.topic.encode()),
        ("dlq.source.partition", str(record.partition).encode()),
        ("dlq.source.offset", str(record.offset).encode()),
        ("dlq.source.timestamp", str(record.timestamp).encode()),
        ("dlq.worker", PROMPT_VERSION.encode()),
    ]

class RecordingSink:
    """A ``VerdictSink`` that counts each verdict once the inner sink has it acknowledged."""

    def __init__(self, sink: VerdictSink, tally: Tally) -> None:
        self._sink = sink
        self._tally = tally

    async def publish(self, verdict: VerdictEvent) -> None:
        """Publish, then count."""
        await self._sink.publish(verdict)
        self._tally.add(verdict)

    async def dead_letter(self, record: Record, reason: str) -> None:
        """Dead-letter (the pipeline counts these)."""
        await self._sink.dead_letter(record, reason)
