"""The broker side of a benchmark: a backlog of realistic traces, verdict timestamps, and the
cleanup of its topics (created with ``scripts/kafka/broker.py``)."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from consumer.kafka.compat import load_topic
from consumer.load_sample import sample_traces

HANG_MARKER = " [[hang]]"


@dataclass(frozen=True, slots=True)
class Backlog:
    """A traces topic filled before a run: ``count`` traces, every ``hang_every``-th hangs."""

    topic: str
    count: int
    partitions: int
    hang_every: int | None = None


def traces(
    count: int, hang_every: int | None = None, partitions: int = 1, seed: int = 7
) -> Iterator[dict[str, Any]]:
    """Traces of the bundled sample's real sizes: its answers, inputs and documents, reshuffled.

    Trace ``i`` takes its answer and input from one sample row and its documents from the
    same row, in a shuffled order, so sizes follow the sample's distribution (~2.9 kB of
    JSON on average) while ids and document order differ. With ``hang_every``, one trace in
    that many per partition (trace ``i`` goes to partition ``i % partitions``), staggered
    between partitions, carries the judge's hang marker: every partition hangs as often.
    """
    rng = random.Random(seed)
    rows = sample_traces()
    for i in range(count):
        row = rows[rng.randrange(len(rows))]
        documents = list(row["retrieved_documents"])
        rng.shuffle(documents)
        output = row["output"] or "An answer."
        partition, offset = i % partitions, i // partitions
        if hang_every and (offset + 17 * partition) % hang_every == hang_every // 2:
            output += HANG_MARKER
        yield {
            "trace_id": f"bench-{i:07d}",
            "input": row["input"],
            "output": output,
            "retrieved_documents": documents,
            "project_id": "bench",
            "metadata": {"row": row["trace_id"]},
        }


async def delete_topics(bootstrap: str, names: list[str]) -> None:
    """Delete topics, ignoring those already gone."""
    if not names:
        return
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        doomed = [name for name in names if name in existing]
        if doomed:
            await admin.delete_topics(doomed)
    except KafkaError:
        pass  # best effort: a leftover benchmark topic is harmless
    finally:
        await admin.close()


async def fill(bootstrap: str, backlog: Backlog) -> int:
    """Produce the backlog round-robin over the partitions; returns the bytes produced."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=512 * 1024, acks=1
    )
    await producer.start()
    produced = 0
    try:
        pending: list[asyncio.Future[Any]] = []
        backlog_traces = traces(backlog.count, backlog.hang_every, backlog.partitions)
        for i, trace in enumerate(backlog_traces):
            value = json.dumps(trace).encode()
            produced += len(value)
            pending.append(
                await producer.send(
                    backlog.topic, value, key=trace["trace_id"].encode(),
                    partition=i % backlog.partitions,
                )
            )
            if len(pending) >= 5000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return produced


async def fill_keyed(
    bootstrap: str, topic: str, records: Iterable[tuple[bytes, bytes]]
) -> tuple[int, int]:
    """Produce (key, value) pairs, each to the partition its key hashes to (the exporter's
    ``partition_traces_by_id``); returns (records, bytes) produced."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1024 * 1024,
        max_request_size=4 * 1024 * 1024, acks=1,
    )
    await producer.start()
    count = size = 0
    try:
        pending: list[asyncio.Future[Any]] = []
        for key, value in records:
            pending.append(await producer.send(topic, value, key=key))
            count, size = count + 1, size + len(value)
            if len(pending) >= 2000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return count, size


async def end_offset(bootstrap: str, topic: str) -> int:
    """The sum of the end offsets of ``topic``'s partitions (its record count)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        return await _end_offset(consumer, topic)
    finally:
        await consumer.stop()


async def _end_offset(consumer: AIOKafkaConsumer, topic: str) -> int:
    partitions = consumer.partitions_for_topic(topic)
    for _ in range(50):
        if partitions:
            break
        await load_topic(consumer, topic)
        partitions = consumer.partitions_for_topic(topic)
        await asyncio.sleep(0.05)
    ends = await consumer.end_offsets([TopicPartition(topic, p) for p in partitions or ()])
    return int(sum(ends.values()))


class OffsetWatch:
    """Polls a topic's record count (cheap: one ListOffsets request) while a run goes on."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        self._topic = topic

    async def __aenter__(self) -> OffsetWatch:
        await self._consumer.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._consumer.stop()

    async def count(self) -> int:
        """Records in the topic now."""
        return await _end_offset(self._consumer, self._topic)


async def verdict_times(
    bootstrap: str, topic: str, *, values: bool = False
) -> list[tuple[float, bytes | None]]:
    """(producer timestamp in seconds, value if asked) of every record in ``topic``."""
    expected = await end_offset(bootstrap, topic)
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
        enable_auto_commit=False, fetch_max_bytes=16 * 1024 * 1024,
    )
    await consumer.start()
    found: list[tuple[float, bytes | None]] = []
    try:
        idle = 0
        while len(found) < expected and idle < 20:
            batch = await consumer.getmany(timeout_ms=500, max_records=10_000)
            idle = 0 if batch else idle + 1
            for records in batch.values():
                found.extend((r.timestamp / 1000, r.value if values else None) for r in records)
    finally:
        await consumer.stop()
    return found
