"""Where outcomes go: verdicts to ``VERDICTS_TOPIC``, dead letters to ``DLQ_TOPIC``.

``publish`` and ``dead_letter`` return only once the broker has acknowledged the record
(idempotent producer, ``acks=all``): the caller may then mark the offset done.

Dead letters keep the original value, key and headers, and add these headers:
``dlq.reason`` (one line), ``dlq.source.topic``, ``dlq.source.partition``,
``dlq.source.offset``, ``dlq.source.timestamp`` (ms) and ``dlq.worker`` (prompt version).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from consumer.errors import PublishError
from consumer.prompt import PROMPT_VERSION
from schemas.verdict import VerdictEvent

Headers = Sequence[tuple[str, bytes]]
# Kafka's default record limit is 1 MiB: an original above this is cut to leave room for
# the DLQ headers (its original size is recorded).
_DLQ_VALUE_LIMIT = 900_000


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


class KafkaVerdictSink:
    """A ``VerdictSink`` over one idempotent aiokafka producer."""

    def __init__(self, producer: AIOKafkaProducer, verdicts_topic: str, dlq_topic: str) -> None:
        self._producer = producer
        self._verdicts_topic = verdicts_topic
        self._dlq_topic = dlq_topic

    async def publish(self, verdict: VerdictEvent) -> None:
        """Send the verdict keyed by its id and wait for the broker's acknowledgement."""
        try:
            delivery = await self._producer.send(
                self._verdicts_topic,
                value=verdict.model_dump_json().encode("utf-8"),
                key=verdict.verdict_id.encode("utf-8"),
            )
            await delivery
        except KafkaError as exc:
            raise PublishError(f"verdict not acknowledged: {type(exc).__name__}: {exc}") from exc

    async def dead_letter(self, record: Record, reason: str) -> None:
        """Send the original bytes with the reason and source coordinates as headers."""
        value, headers = dead_letter_message(record, reason)
        try:
            delivery = await self._producer.send(
                self._dlq_topic, value=value, key=record.key, headers=headers
            )
            await delivery
        except KafkaError as exc:
            detail = f"{type(exc).__name__}: {exc}"
            raise PublishError(f"dead letter not acknowledged: {detail}") from exc


def dead_letter_message(
    record: Record, reason: str
) -> tuple[bytes | None, list[tuple[str, bytes]]]:
    """The dead letter's value and headers; an original too large to carry them is cut."""
    headers = dead_letter_headers(record, reason)
    value = record.value
    if value is not None and len(value) > _DLQ_VALUE_LIMIT:
        headers.append(("dlq.value_truncated", str(len(value)).encode()))
        value = value[:_DLQ_VALUE_LIMIT]
    return value, headers


def dead_letter_headers(record: Record, reason: str) -> list[tuple[str, bytes]]:
    """The original headers plus the reason and where the record came from."""
    return [
        *record.headers,
        ("dlq.reason", reason.encode("utf-8", "replace")),
        ("dlq.source.topic", record.topic.encode()),
        ("dlq.source.partition", str(record.partition).encode()),
        ("dlq.source.offset", str(record.offset).encode()),
        ("dlq.source.timestamp", str(record.timestamp).encode()),
        ("dlq.worker", PROMPT_VERSION.encode()),
    ]
