"""``TransactionalSink.commit`` when one partition's transaction fails: the producer is kept
(and its outcomes) when it can begin another, replaced when it cannot, and the other
partitions are committed either way. Producers are fakes; the real broker cases (fenced,
cannot start, zombie) are in ``tests/integration/test_exactly_once_ownership.py``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
import structlog
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError, ProducerFenced
from aiokafka.producer.transaction_manager import TransactionState

from consumer.errors import PublishError
from consumer.pipeline.delivery import transactional
from consumer.pipeline.delivery.sink import OutcomeTopics
from consumer.pipeline.delivery.transactional import TransactionalSink
from consumer.pipeline.progress import Commitment
from tests.support.transactional_fakes import FakeProducer, a_verdict, empty_sink

P0, P1 = TopicPartition("traces", 0), TopicPartition("traces", 1)


def at(offset: int) -> Commitment:
    """A commit at ``offset`` with no progress."""
    return Commitment(offset, "")


@dataclass(frozen=True)
class Record:
    """A consumed record (only dead letters are held here: the simplest outcome)."""

    topic: str
    partition: int
    offset: int
    timestamp: int = 0
    key: bytes | None = None
    value: bytes | None = b"{not json"
    headers: tuple[tuple[str, bytes], ...] = ()


async def _sink_with(*partitions: TopicPartition) -> tuple[TransactionalSink,
                                                          dict[str, FakeProducer], list[Any]]:
    """A sink owning ``partitions``, each holding one dead letter at offset 0."""
    sink, producers, lost = empty_sink()
    for tp in partitions:
        await sink.start_partition(tp)
        await sink.dead_letter(Record(tp.topic, tp.partition, 0), "not JSON")
    return sink, producers, lost


@pytest.mark.parametrize(
    ("failure", "state", "aborts"),
    [
        pytest.param(KafkaConnectionError("gone"), TransactionState.READY, 0, id="aborted"),
        pytest.param(KafkaConnectionError("gone"), TransactionState.ABORTABLE_ERROR, 1,
                     id="abortable"),
    ],
)
async def test_a_failed_transaction_the_producer_survives_keeps_its_outcomes(
    failure: BaseException, state: TransactionState, aborts: int
) -> None:
    sink, producers, lost = await _sink_with(P0, P1)
    p0 = producers[sink.transactional_id(P0)]
    p0.fail_with, p0.fail_state = failure, state

    assert await sink.commit({P0: at(1), P1: at(1)}) == {P1: at(1)}
    assert p0.aborts == aborts
    assert not lost
    assert sink.owns(P0)
    assert await sink.commit({P0: at(1)}) == {P0: at(1)}
    assert len(p0.sent) == 1, "the held verdict is published by the next commit"


async def test_a_fenced_producer_is_lost_and_the_next_partition_still_commits() -> None:
    sink, producers, lost = await _sink_with(P0, P1)
    p0 = producers[sink.transactional_id(P0)]
    p0.fail_with, p0.fail_state = ProducerFenced(), TransactionState.FATAL_ERROR

    assert await sink.commit({P0: at(1), P1: at(1)}) == {P1: at(1)}
    assert lost == [P0]
    assert not sink.owns(P0)
    assert len(producers[sink.transactional_id(P1)].sent) == 1
    await sink.close()
    assert p0.stopped
    assert not p0.sent, "a lost producer's outcomes are never published"


async def test_a_producer_in_a_fatal_state_does_not_stop_later_partitions() -> None:
    """aiokafka refuses to begin a transaction in a fatal state with an AssertionError."""
    sink, producers, lost = await _sink_with(P0, P1)
    producers[sink.transactional_id(P0)]._txn_manager.state = TransactionState.FATAL_ERROR

    assert await sink.commit({P0: at(1), P1: at(1)}) == {P1: at(1)}
    assert lost == [P0]


# -- the other failure paths: start, publish, abort, revoke, stop ---------------------------


async def test_a_verdict_without_its_source_cannot_be_held() -> None:
    sink, _, _ = await _sink_with(P0)
    with pytest.raises(PublishError, match="source"):
        await sink.publish(a_verdict(None))


async def test_a_commit_publishes_every_outcome_held_with_the_progress_once() -> None:
    # Every held outcome is of a record done, and the progress given counts it done (below
    # the watermark, or above it and not unfinished): all go, whatever the watermark.
    sink, producers, _ = empty_sink()
    await sink.start_partition(P0)
    for offset in (0, 2):
        await sink.publish(a_verdict(P0, offset))
    p0 = producers[sink.transactional_id(P0)]

    assert await sink.commit({P0: Commitment(1, "g1:...")}) == {P0: Commitment(1, "g1:...")}
    assert p0.sent_to == [("verdicts", b"v-0"), ("verdicts", b"v-2")]
    assert p0.offsets == [{P0: (1, "g1:...")}], "the progress goes with the offset"
    await sink.publish(a_verdict(P0, 3))
    assert await sink.commit({P0: at(4)}) == {P0: at(4)}
    assert p0.sent_to[2:] == [("verdicts", b"v-3")], "each outcome once, in its own commit"
    assert sink.transactional_id(P0) == "group.traces.0"


async def test_outcomes_and_commits_of_a_partition_not_owned_are_dropped() -> None:
    sink, producers, _ = await _sink_with(P0)
    await sink.dead_letter(Record(P1.topic, P1.partition, 0), "not JSON")  # P1: not started

    assert await sink.commit({P0: at(1), P1: at(1)}) == {P0: at(1)}
    assert sink.transactional_id(P1) not in producers


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(KafkaConnectionError("no broker"), id="unreachable"),
        pytest.param(ProducerFenced(), id="fenced-at-init"),
        pytest.param(asyncio.CancelledError(), id="cancelled"),
    ],
)
async def test_a_producer_that_cannot_start_is_stopped_and_the_retry_starts_afresh(
    failure: BaseException,
) -> None:
    made: list[FakeProducer] = []

    def make(transactional_id: str) -> Any:
        made.append(FakeProducer(transactional_id, start_error=failure if not made else None))
        return made[-1]

    sink = TransactionalSink(make, "group", OutcomeTopics("verdicts", "dlq"))
    with pytest.raises(type(failure)) as raised:
        await sink.start_partition(P0)
    assert raised.value is failure, "raised as it is (its text names its class once)"
    assert made[0].stopped, "a half-started producer is stopped, not leaked"
    assert not sink.owns(P0)
    await sink.dead_letter(Record(P0.topic, P0.partition, 0), "not JSON")
    assert await sink.commit({P0: at(1)}) == {}, "nothing held or committed without a producer"

    await sink.start_partition(P0)
    assert sink.owns(P0)
    assert len(made) == 2
    await sink.start_partition(P0)  # already owned: no third producer
    assert len(made) == 2


@pytest.mark.parametrize(
    "abort_error",
    [
        pytest.param(KafkaConnectionError("gone"), id="kafka-error"),
        pytest.param(AssertionError("Invalid state transition"), id="state-machine"),
    ],
)
async def test_an_abort_that_fails_loses_the_producer(abort_error: BaseException) -> None:
    sink, producers, lost = await _sink_with(P0, P1)
    p0 = producers[sink.transactional_id(P0)]
    p0.fail_with, p0.fail_state = KafkaConnectionError("gone"), TransactionState.ABORTABLE_ERROR
    p0.abort_error = abort_error

    assert await sink.commit({P0: at(1), P1: at(1)}) == {P1: at(1)}
    assert p0.aborts == 1
    assert lost == [P0]
    assert not sink.owns(P0)


async def test_an_abort_that_hangs_is_bounded_and_loses_the_producer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transactional, "ABORT_TIMEOUT_S", 0.05)
    sink, producers, lost = await _sink_with(P0)
    p0 = producers[sink.transactional_id(P0)]
    p0.fail_with, p0.fail_state = KafkaConnectionError("gone"), TransactionState.ABORTABLE_ERROR

    async def hang() -> None:
        await asyncio.Event().wait()

    p0.abort_transaction = hang  # type: ignore[method-assign]
    assert await asyncio.wait_for(sink.commit({P0: at(1)}), 5) == {}
    assert lost == [P0]


async def test_a_revoke_forgets_the_outcomes_and_stops_the_producers() -> None:
    sink, producers, lost = await _sink_with(P0, P1)
    p0 = producers[sink.transactional_id(P0)]

    await sink.partitions_revoked([P0])
    assert p0.stopped
    assert not sink.owns(P0)
    await sink.dead_letter(Record(P0.topic, P0.partition, 1), "late")  # a late completion
    assert await sink.commit({P0: at(2), P1: at(1)}) == {P1: at(1)}
    assert not p0.sent, "a revoked partition's outcomes are judged again by its next owner"
    assert not lost, "a revoke is not a loss: the owner already knows"


@pytest.mark.parametrize(
    ("stop_error", "stop_hangs"),
    [
        pytest.param(KafkaConnectionError("gone"), False, id="fails"),
        pytest.param(None, True, id="hangs"),
    ],
)
async def test_a_producer_stop_that_fails_or_hangs_does_not_fail_the_close(
    monkeypatch: pytest.MonkeyPatch, stop_error: BaseException | None, stop_hangs: bool
) -> None:
    monkeypatch.setattr(transactional, "STOP_TIMEOUT_S", 0.05)
    sink, producers, _ = await _sink_with(P0, P1)
    p0 = producers[sink.transactional_id(P0)]
    p0.stop_error, p0.stop_hangs = stop_error, stop_hangs

    with structlog.testing.capture_logs() as logs:
        await asyncio.wait_for(sink.close(), 5)
    assert all(p.stopped for p in producers.values())
    assert [e["event"] for e in logs] == ["producer_stop_failed"]
    assert not sink.owns(P0)
    assert not sink.owns(P1)
