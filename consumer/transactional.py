"""``DELIVERY=exactly_once``: outcomes and offsets committed in one Kafka transaction.

Records still finish out of order, but their outcomes wait here, per input partition, until
the partition's watermark passes them. A commit then writes, in one transaction of that
partition's own producer, every buffered outcome below the watermark and the watermark
itself (``send_offsets_to_transaction``). A ``read_committed`` reader therefore sees an
outcome exactly when its offset is committed: a crash before the commit aborts both, and the
redelivered records are judged again without a visible duplicate.

aiokafka speaks TxnOffsetCommit v0, which carries no group generation (no KIP-447), so
fencing rests on the transactional id: one per input partition, stable across restarts and
workers (``<group>.<topic>.<partition>``). The worker that is assigned a partition
initialises that id, which aborts the previous owner's open transaction and fences it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass

import structlog
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from consumer.errors import PublishError
from consumer.sink import Record, dead_letter_message
from schemas.verdict import VerdictEvent

log = structlog.get_logger(__name__)

ProducerFactory = Callable[[str], AIOKafkaProducer]
STOP_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class _Outcome:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None


class TransactionalSink:
    """A ``VerdictSink`` whose ``commit`` publishes outcomes and offsets atomically."""

    def __init__(
        self, make_producer: ProducerFactory, group_id: str, verdicts_topic: str, dlq_topic: str
    ) -> None:
        self._make_producer = make_producer
        self._group_id = group_id
        self._verdicts_topic = verdicts_topic
        self._dlq_topic = dlq_topic
        self._producers: dict[TopicPartition, AIOKafkaProducer] = {}
        self._outcomes: dict[TopicPartition, dict[int, _Outcome]] = {}

    def transactional_id(self, tp: TopicPartition) -> str:
        """Stable per input partition, so the next owner fences the previous one."""
        return f"{self._group_id}.{tp.topic}.{tp.partition}"

    async def publish(self, verdict: VerdictEvent) -> None:
        """Hold the verdict until its offset is committed (in the same transaction)."""
        source = verdict.source
        if source is None:
            raise PublishError("exactly-once needs the verdict's source coordinates")
        value = verdict.model_dump_json().encode("utf-8")
        outcome = _Outcome(self._verdicts_topic, verdict.verdict_id.encode(), value, None)
        self._hold(TopicPartition(source.topic, source.partition), source.offset, outcome)

    async def dead_letter(self, record: Record, reason: str) -> None:
        """Hold the dead letter until its offset is committed (in the same transaction)."""
        value, headers = dead_letter_message(record, reason)
        outcome = _Outcome(self._dlq_topic, record.key, value, headers)
        self._hold(TopicPartition(record.topic, record.partition), record.offset, outcome)

    def _hold(self, tp: TopicPartition, offset: int, outcome: _Outcome) -> None:
        if tp not in self._producers:
            return  # the partition was revoked meanwhile: its new owner judges it again
        self._outcomes.setdefault(tp, {})[offset] = outcome

    async def commit(self, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """One transaction per partition: its outcomes below the watermark, and the watermark.

        Returns the offsets that committed; a partition whose transaction failed keeps its
        outcomes and is tried again at the next commit.
        """
        committed: dict[TopicPartition, int] = {}
        for tp, offset in offsets.items():
            producer = self._producers.get(tp)
            if producer is None:
                continue
            held = self._outcomes.get(tp, {})
            ready = sorted(o for o in held if o < offset)
            deliveries: list[asyncio.Future[object]] = []
            try:
                async with producer.transaction():
                    for o in ready:
                        outcome = held[o]
                        deliveries.append(
                            await producer.send(
                                outcome.topic,
                                outcome.value,
                                key=outcome.key,
                                headers=outcome.headers,
                            )
                        )
                    await producer.send_offsets_to_transaction({tp: offset}, self._group_id)
                await asyncio.gather(*deliveries)
            except KafkaError as exc:
                # An aborted or fenced transaction fails its sends too: their errors are the
                # same one, already handled here.
                for delivery in deliveries:
                    delivery.add_done_callback(_retrieve)
                log.warning(
                    "transaction_failed", partition=str(tp), error=f"{type(exc).__name__}: {exc}"
                )
                continue
            for o in ready:
                del held[o]
            committed[tp] = offset
        return committed

    async def partitions_assigned(self, assigned: Collection[TopicPartition]) -> None:
        """Start a producer per new partition; initialising its id fences the previous owner."""
        for tp in assigned:
            if tp in self._producers:
                continue
            producer = self._make_producer(self.transactional_id(tp))
            await producer.start()
            self._producers[tp] = producer

    async def partitions_revoked(self, revoked: Collection[TopicPartition]) -> None:
        """Forget the partitions' outcomes (never committed) and stop their producers."""
        for tp in revoked:
            self._outcomes.pop(tp, None)
            producer = self._producers.pop(tp, None)
            if producer is not None:
                await _stop_quietly(producer)

    async def close(self) -> None:
        """Stop every producer (the pipeline has committed what it could)."""
        await self.partitions_revoked(list(self._producers))


def _retrieve(delivery: asyncio.Future[object]) -> None:
    if not delivery.cancelled():
        delivery.exception()


async def _stop_quietly(producer: AIOKafkaProducer) -> None:
    # Bounded: with the broker away stop() would retry for ~30 s, past the pod's grace
    # period; what it still held was never committed, so it is judged again anyway.
    try:
        await asyncio.wait_for(producer.stop(), STOP_TIMEOUT_S)
    except (KafkaError, TimeoutError) as exc:
        log.warning("producer_stop_failed", error=f"{type(exc).__name__}: {exc}")
