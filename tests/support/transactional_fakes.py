"""Stand-ins for the transactional sink's tests: a producer that records its transactions,
a sink made of them, and a verdict to publish."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition
from aiokafka.producer.transaction_manager import TransactionState

from consumer.pipeline.delivery.sink import OutcomeTopics
from consumer.pipeline.delivery.transactional import TransactionalSink
from schemas.verdict import Source, Truncation, VerdictEvent


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
    sent_to: list[tuple[str, bytes | None]] = field(default_factory=list)  # (topic, key)
    offsets: list[dict[TopicPartition, tuple[int, str]]] = field(default_factory=list)
    aborts: int = 0
    stopped: bool = False
    start_error: BaseException | None = None
    stop_error: BaseException | None = None
    stop_hangs: bool = False
    abort_error: BaseException | None = None

    def __post_init__(self) -> None:
        self._txn_manager = _Manager(self.transactional_id)

    async def start(self) -> None:
        if self.start_error is not None:
            raise self.start_error

    async def stop(self) -> None:
        self.stopped = True
        if self.stop_hangs:
            await asyncio.Event().wait()
        if self.stop_error is not None:
            raise self.stop_error

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        if self._txn_manager.state == TransactionState.FATAL_ERROR:
            raise AssertionError("Invalid state transition FATAL_ERROR -> IN_TRANSACTION")
        pending: list[tuple[str, bytes | None, bytes]] = []
        self._pending = pending
        yield
        if self.fail_with is not None:
            failure, self.fail_with = self.fail_with, None
            self._txn_manager.state = self.fail_state
            raise failure
        self.sent += [value for _, _, value in pending]
        self.sent_to += [(topic, key) for topic, key, _ in pending]

    async def send(self, topic: str, value: bytes, key: bytes | None = None, **_: Any) -> Any:
        self._pending.append((topic, key, value))
        future: Any = _done()
        return future

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, tuple[int, str]],
                                          group_id: str) -> None:
        self.offsets.append(offsets)

    async def abort_transaction(self) -> None:
        self.aborts += 1
        if self.abort_error is not None:
            raise self.abort_error
        self._txn_manager.state = TransactionState.READY


def _done() -> Any:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


def empty_sink() -> tuple[TransactionalSink, dict[str, FakeProducer], list[Any]]:
    """A sink of ``FakeProducer``s owning no partition; the producers it made; its losses."""
    producers: dict[str, FakeProducer] = {}
    lost: list[Any] = []

    def make(transactional_id: str) -> Any:
        producers[transactional_id] = FakeProducer(transactional_id)
        return producers[transactional_id]

    sink = TransactionalSink(make, "group", OutcomeTopics("verdicts", "dlq"))
    sink.on_lost = lost.append
    return sink, producers, lost


def a_verdict(tp: TopicPartition | None, offset: int = 0) -> VerdictEvent:
    """A pass verdict on the record at ``offset`` of ``tp`` (no source when None)."""
    source = None if tp is None else Source(topic=tp.topic, partition=tp.partition, offset=offset)
    return VerdictEvent(
        verdict_id=f"v-{offset}", trace_id=f"t-{offset}", prompt_version="v1", judge_model="m",
        verdict="pass", score=1.0, raw_score=5, threshold=0.5, reason="ok",
        unsupported_claims=[], error=None, truncation=Truncation(), usage=None, latency_ms=1,
        evaluated_at="2024-05-01T00:00:00.000Z", source=source,
    )
