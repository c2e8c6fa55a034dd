"""The batch replay's published-ids ledger and the sink in front of the broker: what a stopped
or crashed run leaves for the next (nothing sent twice, nothing lost), and the batch price."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from consumer.commands.batch_published import (
    BATCH_PRICE_FACTOR,
    PublishedLedger,
    PublishOnce,
    dead_letter_key,
    ledger_path,
)
from consumer.cost.pricing import Prices
from consumer.errors import PublishError
from consumer.judge.result import Answered
from consumer.stream.sink import Headers, Record
from consumer.verdicts import Context, verdict_for, verdict_id
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
    path = ledger_path(tmp_path / "batch-state.json")
    assert path.name == "batch-state.json.published"
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


async def test_the_verdicts_the_batch_answered_cost_half(tmp_path: Path) -> None:
    broker = Broker()
    with PublishedLedger(tmp_path / "s.json.published") as ledger:
        sink = PublishOnce(broker, ledger, lambda v: v.trace_id == "batch")
        await sink.publish(verdict("batch", cost_usd=0.002))
        await sink.publish(verdict("synchronous", cost_usd=0.002))
        await sink.publish(verdict("unpriced"))
    costs = {v.trace_id: v.cost_usd for v in broker.sent}
    assert costs == {"batch": 0.002 * BATCH_PRICE_FACTOR, "synchronous": 0.002,
                     "unpriced": None}
    assert BATCH_PRICE_FACTOR == 0.5
