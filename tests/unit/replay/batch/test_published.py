"""The batch replay's published-ids ledger and the sink in front of the broker: what a stopped
or crashed run leaves for the next (nothing sent twice, nothing lost), and the batch price."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from consumer.cost.pricing import Prices
from consumer.errors import PublishError
from consumer.judge.result import Answered
from consumer.pipeline.delivery.sink import Headers, Record
from consumer.replay.batch.published import (
    BATCH_PRICE_FACTOR,
    PublishedLedger,
    PublishOnce,
    as_billed,
    dead_letter_key,
    ledger_path,
)
from consumer.rules.verdicts import Context, verdict_for, verdict_id
from schemas.judge import JudgeAnswer
from schemas.trace import TraceEvent
from schemas.verdict import Truncation, Usage, VerdictEvent


def verdict(trace_id: str, cost_usd: float | None = None) -> VerdictEvent:
    """A pass verdict; with ``cost_usd``, priced to cost that much."""
    usage = Usage(prompt_tokens=1_000_000, completion_tokens=0, total_tokens=1_000_000)
    prices = Prices(cost_usd, 0.0) if cost_usd is not None else None
    ctx = Context("gpt-4o-mini", 0.5, Truncation(), None, prices=prices)
    answered = Answered(JudgeAnswer(score=5, reason="ok"), usage, 1, 1)
    return verdict_for(TraceEvent(trace_id=trace_id, output="An answer."), answered, ctx)


def loaded(path: Path) -> int:
    """How many outcomes a new run finds published."""
    with PublishedLedger(path) as ledger:
        return ledger.loaded


@dataclass(frozen=True)
class DeadRecord:
    topic: str = "llm-traces"
    partition: int = 2
    offset: int = 48213
    timestamp: int = 0
    key: bytes | None = None
    value: bytes | None = b"not json"
    headers: Headers = ()


class Broker:
    """The sink behind: what it acknowledged; ``refuse`` fails the next sends."""

    def __init__(self) -> None:
        self.sent: list[VerdictEvent] = []
        self.dead: list[str] = []
        self.refuse = 0

    async def publish(self, verdict: VerdictEvent) -> None:
        if self.refuse:
            self.refuse -= 1
            raise PublishError("the broker did not acknowledge it")
        self.sent.append(verdict)

    async def dead_letter(self, record: Record, reason: str) -> None:
        self.dead.append(reason)


async def test_a_second_run_sends_only_what_the_first_did_not(tmp_path: Path) -> None:
    path = ledger_path(tmp_path / "batch-state.json", "verdicts", "kafka:9092")
    assert path != ledger_path(tmp_path / "batch-state.json", "verdicts-2", "kafka:9092")
    assert path != ledger_path(tmp_path / "batch-state.json", "verdicts", "other:9092")
    assert path.name.startswith("batch-state.json.")
    assert path.suffix == ".published"
    broker = Broker()
    with PublishedLedger(path) as ledger:
        first = PublishOnce(broker, ledger)
        await first.publish(verdict("a"))
        await first.dead_letter(DeadRecord(), "not JSON")
        # Each line is on disk once acknowledged, before the run ends.
        assert path.read_text() == f"{verdict_id('a')}\n{dead_letter_key(DeadRecord())}\n"
    with PublishedLedger(path) as ledger:
        assert ledger.loaded == 2
        second = PublishOnce(broker, ledger)
        for trace_id in ("a", "b"):
            await second.publish(verdict(trace_id))
        await second.dead_letter(DeadRecord(), "not JSON")
        await second.dead_letter(DeadRecord(offset=48214), "not JSON either")
    assert [v.trace_id for v in broker.sent] == ["a", "b"]
    assert broker.dead == ["not JSON", "not JSON either"]
    assert second.already_published == 2
    assert loaded(path) == 4


async def test_a_verdict_the_broker_did_not_acknowledge_is_not_recorded(tmp_path: Path) -> None:
    broker = Broker()
    broker.refuse = 1
    with PublishedLedger(tmp_path / "s.json.published") as ledger:
        sink = PublishOnce(broker, ledger)
        with pytest.raises(PublishError):
            await sink.publish(verdict("a"))
        assert verdict_id("a") not in ledger
        await sink.publish(verdict("a"))  # the pipeline's retry
    assert [v.trace_id for v in broker.sent] == ["a"]
    assert loaded(tmp_path / "s.json.published") == 1


def test_a_line_cut_by_a_crash_counts_as_unpublished_and_the_next_line_starts_whole(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.json.published"
    whole, cut = verdict_id("a"), verdict_id("b")[:20]
    path.write_text(f"{whole}\n{cut}")
    with PublishedLedger(path) as ledger:
        assert (ledger.loaded, whole in ledger, cut in ledger) == (1, True, False)
        ledger.record(verdict_id("b"))
    assert path.read_text().split("\n") == [whole, cut, verdict_id("b"), ""]
    with PublishedLedger(path) as again:  # the cut line stays, matching no verdict id
        assert verdict_id("b") in again


def test_a_request_the_batch_answered_is_billed_once_at_half_price() -> None:
    priced = verdict("first", cost_usd=0.002)
    first = as_billed(priced, by_batch=True, first=True)
    assert (first.cost_usd, first.cached) == (0.002 * BATCH_PRICE_FACTOR, False)
    assert BATCH_PRICE_FACTOR == 0.5
    other = as_billed(verdict("same-request", cost_usd=0.002), by_batch=True, first=False)
    assert (other.cost_usd, other.cached, other.usage) == (0.0, True, Usage())
    unpriced = as_billed(verdict("unpriced"), by_batch=True, first=False)
    assert (unpriced.cost_usd, unpriced.cached) == (None, True)
    synchronous = verdict("synchronous", cost_usd=0.002)
    assert as_billed(synchronous, by_batch=False, first=False) is synchronous


async def test_a_record_repeated_in_the_window_is_sent_once_and_counted_as_repeated(
    tmp_path: Path,
) -> None:
    broker = Broker()
    with PublishedLedger(tmp_path / "s.json.published") as ledger:
        sink = PublishOnce(broker, ledger)
        await sink.publish(verdict("t"))
        await sink.publish(verdict("t"))
    assert len(broker.sent) == 1
    assert (sink.repeated, sink.already_published) == (1, 0)
    with PublishedLedger(tmp_path / "s.json.published") as ledger:
        again = PublishOnce(broker, ledger)
        await again.publish(verdict("t"))
    assert (again.repeated, again.already_published, len(broker.sent)) == (0, 1, 1)
