"""A verdict's event is sent only for a verdict on the verdicts topic: at least once, once the
broker acknowledged it; exactly once, once its transaction committed, never for a verdict
held and then discarded (its transaction aborted, its partition revoked, its producer lost),
whose record is judged again."""

from __future__ import annotations

from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError, ProducerFenced
from aiokafka.producer.transaction_manager import TransactionState

from consumer import wiring
from consumer.pipeline.delivery.events.sink import EventingSink
from consumer.pipeline.delivery.sink import VerdictSink
from consumer.pipeline.delivery.transactional import TransactionalSink
from consumer.pipeline.progress import Commitment
from schemas.verdict import VerdictEvent
from tests.support.transactional_fakes import FakeProducer, a_verdict, empty_sink
from tests.support.verdict_sinks import Emitted, Sink

P0 = TopicPartition("llm-traces", 0)


async def exactly_once(
    emitted: Emitted,
) -> tuple[VerdictSink, TransactionalSink, FakeProducer]:
    """The worker's exactly-once wiring with events, owning ``P0``."""
    transactions, producers, _ = empty_sink()
    sink = wiring.with_events(transactions, emitted)
    await transactions.start_partition(P0)
    return sink, transactions, producers[transactions.transactional_id(P0)]


def ids(verdicts: list[VerdictEvent]) -> list[str]:
    return [verdict.verdict_id for verdict in verdicts]


async def test_exactly_once_a_held_verdict_has_its_event_once_its_transaction_commits() -> None:
    emitted = Emitted()
    sink, transactions, producer = await exactly_once(emitted)
    await sink.publish(a_verdict(P0, 0))
    await sink.publish(a_verdict(P0, 1))
    assert emitted.verdicts == [], "held for a transaction that may yet be discarded"

    producer.fail_with = KafkaConnectionError("gone")  # aborted; the producer goes on
    assert await transactions.commit({P0: Commitment(2, "")}) == {}
    assert emitted.verdicts == []
    assert await transactions.commit({P0: Commitment(2, "")}) == {P0: Commitment(2, "")}
    assert ids(emitted.verdicts) == ["v-0", "v-1"], "what that transaction wrote, once"
    await sink.publish(a_verdict(P0, 2))
    assert await transactions.commit({P0: Commitment(3, "")}) == {P0: Commitment(3, "")}
    published = [(key or b"").decode() for _, key in producer.sent_to]
    assert ids(emitted.verdicts) == ["v-0", "v-1", "v-2"] == published


async def test_exactly_once_a_verdict_discarded_before_its_commit_has_no_event() -> None:
    emitted = Emitted()
    sink, transactions, producer = await exactly_once(emitted)
    await sink.publish(a_verdict(P0, 0))
    # Another worker owns the partition now: this producer cannot go on.
    producer.fail_with, producer.fail_state = ProducerFenced(), TransactionState.FATAL_ERROR
    assert await transactions.commit({P0: Commitment(1, "")}) == {}
    assert not transactions.owns(P0)
    await sink.publish(a_verdict(P0, 1))  # finished after the loss: held nowhere

    await transactions.start_partition(P0)  # assigned again, and revoked before any commit
    await sink.publish(a_verdict(P0, 2))
    await transactions.partitions_revoked([P0])
    assert await transactions.commit({P0: Commitment(3, "")}) == {}
    await transactions.close()
    assert emitted.verdicts == []


async def test_at_least_once_the_event_follows_the_acknowledgement() -> None:
    emitted, acknowledging = Emitted(), Sink()
    sink = wiring.with_events(acknowledging, emitted)
    assert isinstance(sink, EventingSink)
    verdict = a_verdict(P0, 0)
    await sink.publish(verdict)
    assert emitted.verdicts == [verdict] == acknowledging.published


async def test_without_events_the_sink_is_the_deliverys_own() -> None:
    transactions, _, _ = empty_sink()
    assert wiring.with_events(transactions, None) is transactions
