"""Helpers to drive a real broker from tests: topics, producing, reading back, offsets."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from consumer.kafka.compat import load_topic
from consumer.settings import Settings, load_settings
from consumer.worker import run_worker
from scripts.kafka import broker


@dataclass(frozen=True)
class Topics:
    """One test's own topics and consumer group."""

    traces: str
    verdicts: str
    dlq: str
    group: str

    @classmethod
    def fresh(cls, name: str) -> Topics:
        tag = f"{name}-{uuid.uuid4().hex[:8]}"
        return cls(f"traces-{tag}", f"verdicts-{tag}", f"dlq-{tag}", f"group-{tag}")

    def env(self, bootstrap: str) -> dict[str, str]:
        """The worker's environment for these topics."""
        return {
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "TRACES_TOPIC": self.traces,
            "VERDICTS_TOPIC": self.verdicts,
            "DLQ_TOPIC": self.dlq,
            "CONSUMER_GROUP": self.group,
        }


async def create_topics(bootstrap: str, topics: Topics, partitions: int = 3) -> None:
    """Create the traces topic with ``partitions`` and the outputs with one each."""
    await broker.create_topics(
        bootstrap, {topics.traces: partitions, topics.verdicts: 1, topics.dlq: 1}
    )


async def produce(
    bootstrap: str, topic: str, values: Sequence[bytes | None],
    *, keys: Sequence[bytes | None] | None = None, first_timestamp_ms: int | None = None,
) -> None:
    """Produce raw values, spread over the partitions by key (round-robin when keys are None);
    with ``first_timestamp_ms``, record i is stamped a second after record i - 1 (a window)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        partitions = sorted(await producer.partitions_for(topic))
        for i, value in enumerate(values):
            key = keys[i] if keys else None
            if value is None and key is None:
                key = b"tombstone"  # Kafka needs a key or a value
            partition = None if key else partitions[i % len(partitions)]
            timestamp_ms = None if first_timestamp_ms is None else first_timestamp_ms + i * 1000
            await producer.send(topic, value, key=key, partition=partition,
                                timestamp_ms=timestamp_ms)
        await producer.flush()
    finally:
        await producer.stop()


def trace(trace_id: str, output: Any = "An answer.", **fields: Any) -> bytes:
    """A trace event's bytes."""
    return json.dumps({"trace_id": trace_id, "output": output, **fields}).encode()


async def read_all(
    bootstrap: str, topic: str, *, at_least: int = 0, timeout_s: float = 60.0,
    settle_s: float = 0.0,
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of ``topic`` (read_committed) once ``at_least`` are there, then ``settle_s``
    more seconds to catch any extra."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
        enable_auto_commit=False, isolation_level="read_committed",
    )
    await consumer.start()
    records: list[ConsumerRecord[bytes, bytes]] = []
    try:
        deadline = time.monotonic() + timeout_s
        settle_until: float | None = None
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            for part in batch.values():
                records.extend(part)
            if len(records) >= at_least:
                settle_until = settle_until or time.monotonic() + settle_s
                if time.monotonic() >= settle_until:
                    break
    finally:
        await consumer.stop()
    return records


async def group_offsets(bootstrap: str, group: str, topic: str) -> tuple[dict[int, int],
                                                                         dict[int, int]]:
    """(committed offsets of ``group``, end offsets) per partition of ``topic``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(
            topic) or await _partitions(consumer, topic))]
        ends = await consumer.end_offsets(partitions)
        committed = {tp.partition: (await consumer.committed(tp)) or 0 for tp in partitions}
        return committed, {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    for _ in range(50):
        partitions = consumer.partitions_for_topic(topic)
        if partitions:
            return set(partitions)
        await load_topic(consumer, topic)
        await asyncio.sleep(0.1)
    raise AssertionError(f"topic {topic} has no partitions")


def verdicts_by_trace(records: list[ConsumerRecord[bytes, bytes]]) -> dict[str, list[dict[str,
                                                                                          Any]]]:
    """Verdict events grouped by trace id."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        assert record.value is not None
        verdict = json.loads(record.value)
        grouped.setdefault(verdict["trace_id"], []).append(verdict)
    return grouped


@asynccontextmanager
async def in_process_worker(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, stop: asyncio.Event | None = None
) -> AsyncIterator[asyncio.Task[None]]:
    """The real worker in this event loop, configured by ``env`` alone (the shell's worker
    variables are cleared); stopped and drained on exit, or when ``stop`` is set (a SIGTERM
    at a moment the test chooses)."""
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    stop = stop or asyncio.Event()
    task = asyncio.create_task(run_worker(load_settings(), stop))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=60)
