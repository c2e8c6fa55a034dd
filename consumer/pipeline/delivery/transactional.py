"""``DELIVERY=exactly_once``: outcomes and offsets committed in one Kafka transaction.

Records still finish out of order, and their outcomes wait here, per input partition, until
the next commit. A commit then writes, in one transaction of that partition's own producer,
every buffered outcome and the watermark with its progress (``send_offsets_to_transaction``
takes the metadata too): the progress counts each of those records done, so a
``read_committed`` reader sees an outcome exactly when the commit says its record is
finished. A crash before the commit aborts both, and the records are judged again without a
visible duplicate. Outcomes flow with every commit, whatever the watermark waits for.

aiokafka speaks TxnOffsetCommit v0, which carries no group generation (no KIP-447), so
fencing rests on the transactional id: one per input partition, stable across restarts and
workers (``<group>.<topic>.<partition>``). The worker that is assigned a partition
initialises that id, which aborts the previous owner's open transaction and fences it.

A producer that can no longer commit (fenced by another owner of its id, or left in a fatal
state by a transaction the broker timed out) is dropped with its partition's held outcomes,
and the partition is reported lost: ``ownership.py`` starts it again from its committed
offset. A commit that fails in a way the producer survives keeps the outcomes for the next.

A verdict is known to be on its topic only once its transaction commits: ``on_committed``
hears of each verdict then (``VERDICT_EVENTS`` emits its event there), never of one held and
discarded (the partition revoked or lost, the transaction aborted), which is judged again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass

import structlog

from consumer.errors import PublishError
from consumer.kafka.clients import start_once
from consumer.kafka.compat import transaction_state
from consumer.kafka.types import AIOKafkaProducer, KafkaError, TopicPartition, TransactionState
from consumer.pipeline.delivery.sink import OutcomeTopics, Record, dead_letter_record
from consumer.pipeline.progress import Commitment
from schemas.verdict import VerdictEvent

log = structlog.get_logger(__name__)

ProducerFactory = Callable[[str], AIOKafkaProducer]
LostPartition = Callable[[TopicPartition], None]
Committed = Callable[[VerdictEvent], None]
STOP_TIMEOUT_S = 5.0
ABORT_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class _Outcome:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None
    verdict: VerdictEvent | None = None  # for ``on_committed``; None for a dead letter


class TransactionalSink:
    """A ``VerdictSink`` whose ``commit`` publishes outcomes and offsets atomically."""

    holds_until_commit = True  # ``publish`` holds, returning without a suspension

    def __init__(
        self, make_producer: ProducerFactory, group_id: str, topics: OutcomeTopics
    ) -> None:
        self._make_producer = make_producer
        self._group_id = group_id
        self._topics = topics
        self._producers: dict[TopicPartition, AIOKafkaProducer] = {}
        # By input offset; a list: a record of spans can be the first record of many traces,
        # each with its verdict (``pipeline/spans.py``).
        self._outcomes: dict[TopicPartition, dict[int, list[_Outcome]]] = {}
        self._stopping: set[asyncio.Task[None]] = set()  # lost producers, being stopped
        self.on_lost: LostPartition = lambda tp: None  # set by the owner of the partitions
        self.on_committed: Committed = lambda verdict: None  # set by whoever reports verdicts

    def transactional_id(self, tp: TopicPartition) -> str:
        """Stable per input partition, so the next owner fences the previous one."""
        return f"{self._group_id}.{tp.topic}.{tp.partition}"

    async def publish(self, verdict: VerdictEvent) -> None:
        """Hold the verdict until its offset is committed (in the same transaction)."""
        source = verdict.source
        if source is None:
            raise PublishError("exactly-once needs the verdict's source coordinates")
        value = verdict.model_dump_json().encode("utf-8")
        outcome = _Outcome(self._topics.verdicts, verdict.verdict_id.encode(), value, None,
                           verdict)
        self._hold(TopicPartition(source.topic, source.partition), source.offset, outcome)

    async def dead_letter(self, record: Record, reason: str) -> None:
        """Hold the dead letter until its offset is committed (in the same transaction)."""
        key, value, headers = dead_letter_record(record, reason)
        outcome = _Outcome(self._topics.dead_letters, key, value, headers)
        self._hold(TopicPartition(record.topic, record.partition), record.offset, outcome)

    def _hold(self, tp: TopicPartition, offset: int, outcome: _Outcome) -> None:
        if tp not in self._producers:
            return  # the partition was revoked meanwhile: its new owner judges it again
        self._outcomes.setdefault(tp, {}).setdefault(offset, []).append(outcome)

    async def commit(
        self, offsets: dict[TopicPartition, Commitment]
    ) -> dict[TopicPartition, Commitment]:
        """One transaction per partition: every outcome it holds now, and the watermark with
        its progress.

        Every outcome held is of a record (or trace) that is done, and the progress given
        (taken at the same instant, before this call) counts it done: below the watermark,
        or above it and not listed as unfinished. So the transaction publishes exactly what
        the progress says is finished. All partitions' outcomes are taken before the first
        transaction is awaited; those that arrive meanwhile wait for the next commit.

        Returns the commitments that committed. A partition whose transaction failed keeps
        its outcomes for the next commit, or, if its producer cannot go on, is reported
        lost; either way the other partitions are still committed.
        """
        taken = {tp: self._outcomes.pop(tp, {}) for tp in offsets if tp in self._producers}
        committed: dict[TopicPartition, Commitment] = {}
        for tp, commitment in offsets.items():
            producer = self._producers.get(tp)
            if producer is None:
                continue
            held = taken[tp]
            ready = sorted(held)
            outcomes = [outcome for o in ready for outcome in held[o]]
            try:
                await self._transaction(producer, tp, outcomes, commitment)
            except (KafkaError, AssertionError) as exc:
                # AssertionError: aiokafka's transaction state machine refuses to begin in
                # a fatal state (fenced, timed out) with an assert, not a KafkaError.
                log.warning(
                    "transaction_failed", partition=str(tp), error=f"{type(exc).__name__}: {exc}"
                )
                if self._producers.get(tp) is producer:  # kept for the next commit
                    again = self._outcomes.setdefault(tp, {})
                    for o, outcomes_at in held.items():
                        again.setdefault(o, [])[:0] = outcomes_at
                if not await _recovered(producer):
                    self._lose(tp, producer)
                continue
            committed[tp] = commitment
            for outcome in outcomes:
                if outcome.verdict is not None:
                    self.on_committed(outcome.verdict)
        return committed

    async def _transaction(
        self, producer: AIOKafkaProducer, tp: TopicPartition, outcomes: list[_Outcome],
        commitment: Commitment,
    ) -> None:
        deliveries: list[asyncio.Future[object]] = []
        try:
            async with producer.transaction():
                for outcome in outcomes:
                    deliveries.append(
                        await producer.send(
                            outcome.topic, outcome.value, key=outcome.key, headers=outcome.headers
                        )
                    )
                await producer.send_offsets_to_transaction({tp: tuple(commitment)},
                                                           self._group_id)
            await asyncio.gather(*deliveries)
        except BaseException:
            # An aborted or fenced transaction fails its sends too: their errors are the
            # same one, handled by the caller.
            for delivery in deliveries:
                delivery.add_done_callback(_retrieve)
            raise

    def _lose(self, tp: TopicPartition, producer: AIOKafkaProducer) -> None:
        """Drop a producer that cannot commit, with the outcomes it held (never committed:
        the partition is judged again from its committed offset), and say so."""
        log.warning("transactional_producer_lost", partition=str(tp),
                    transactional_id=self.transactional_id(tp))
        if self._producers.get(tp) is producer:
            del self._producers[tp]
        self._outcomes.pop(tp, None)
        self._stopping.add(task := asyncio.create_task(_stop_quietly(producer)))
        task.add_done_callback(self._stopping.discard)
        self.on_lost(tp)

    def owns(self, tp: TopicPartition) -> bool:
        """True once the partition's producer is initialised (and until it is lost)."""
        return tp in self._producers

    async def start_partition(self, tp: TopicPartition) -> None:
        """Start the partition's producer; initialising its id fences the previous owner.

        Raises what the start raised (the broker unreachable, the coordinator moving), after
        stopping the half-started producer: the caller retries.
        """
        if tp in self._producers:
            return  # initialised by an attempt whose later step failed: it still fences
        producer = self._make_producer(self.transactional_id(tp))
        try:
            if (unreachable := await start_once(producer)) is not None:
                raise unreachable.error
        except BaseException:
            await _stop_quietly(producer)
            raise
        self._producers[tp] = producer

    async def partitions_revoked(self, revoked: Collection[TopicPartition]) -> None:
        """Forget the partitions' outcomes (never committed) and stop their producers."""
        stopping = []
        for tp in revoked:
            self._outcomes.pop(tp, None)
            if (producer := self._producers.pop(tp, None)) is not None:
                stopping.append(_stop_quietly(producer))
        await asyncio.gather(*stopping)  # at once: each may take its bound with the broker away

    async def close(self) -> None:
        """Stop every producer (the pipeline has committed what it could)."""
        await self.partitions_revoked(list(self._producers))
        await asyncio.gather(*self._stopping)


async def _recovered(producer: AIOKafkaProducer) -> bool:
    """After a failed transaction: can this producer begin another? Aborts first when the
    failure left an abortable transaction open."""
    if transaction_state(producer) == TransactionState.ABORTABLE_ERROR:
        try:
            await asyncio.wait_for(producer.abort_transaction(), ABORT_TIMEOUT_S)
        except (KafkaError, AssertionError, TimeoutError):
            return False
    return bool(transaction_state(producer) == TransactionState.READY)


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
