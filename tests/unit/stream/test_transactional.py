"""``TransactionalSink.commit`` when one partition's transaction fails: the producer is kept
(and its outcomes) when it can begin another, replaced when it cannot, and the other
partitions are committed either way. Producers are fakes; the real broker cases (fenced,
cannot start, zombie) are in ``tests/integration/test_exactly_once_ownership.py``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError, ProducerFenced
from aiokafka.producer.transaction_manager import TransactionState

from consumer.stream.transactional import TransactionalSink

P0, P1 = TopicPartition("traces", 0), TopicPartition("traces", 1)


@dataclass
class _Manager:
    transactional_id: str
    state: TransactionState = TransactionState.READY


@dataclass
class FakeProducer:
    """Records what was sent and committed; ``fail_with`` breaks the next transaction and
    leaves the transaction state at ``fail_state``."""

    transactional_id: str
    fail_with: BaseException | None = None
    fail_state: TransactionState = TransactionState.READY
    sent: list[bytes] = field(default_factory=list)
    offsets: list[dict[TopicPartition, int]] = field(default_factory=list)
    aborts: int = 0
    stopped: bool = False

    def __post_init__(self) -> None:
        self._txn_manager = _Manager(self.transactional_id)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self.stopped = True

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        if self._txn_manager.state == TransactionState.FATAL_ERROR:
            raise AssertionError("Invalid state transition FATAL_ERROR -> IN_TRANSACTION")
        pending: list[bytes] = []
        self._pending = pending
        yield
        if self.fail_with is not None:
            failure, self.fail_with = self.fail_with, None
            self._txn_manager.state = self.fail_state
            raise failure
        self.sent += pending

    async def send(self, topic: str, value: bytes, **_: Any) -> Any:
        self._pending.append(value)
        future: Any = _done()
        return future

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, int],
                                          group_id: str) -> None:
        self.offsets.append(offsets)

    async def abort_transaction(self) -> None:
        self.aborts += 1
        self._txn_manager.state = TransactionState.READY


def _done() -> Any:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


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
    producers: dict[str, FakeProducer] = {}
    lost: list[Any] = []

    def make(transactional_id: str) -> Any:
        producers[transactional_id] = FakeProducer(transactional_id)
        return producers[transactional_id]

    sink = TransactionalSink(make, "group", "verdicts", "dlq")
    sink.on_lost = lost.append
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

    assert await sink.commit({P0: 1, P1: 1}) == {P1: 1}
    assert p0.aborts == aborts
    assert not lost
    assert sink.owns(P0)
    assert await sink.commit({P0: 1}) == {P0: 1}
    assert len(p0.sent) == 1, "the held verdict is published by the next commit"


async def test_a_fenced_producer_is_lost_and_the_next_partition_still_commits() -> None:
    sink, producers, lost = await _sink_with(P0, P1)
    p0 = producers[sink.transactional_id(P0)]
    p0.fail_with, p0.fail_state = ProducerFenced(), TransactionState.FATAL_ERROR

    assert await sink.commit({P0: 1, P1: 1}) == {P1: 1}
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

    assert await sink.commit({P0: 1, P1: 1}) == {P1: 1}
    assert lost == [P0]
