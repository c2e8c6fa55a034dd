"""The budget's reading of the results topic: what counts as a cost, and what it costs the
event loop to read its own verdicts back."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import pytest
from aiokafka.errors import KafkaConnectionError
from structlog.testing import capture_logs

from consumer.cost.daily_budget import DailyBudget
from consumer.pipeline import fleet_spend
from consumer.pipeline.fleet_spend import FleetSpend


@pytest.mark.parametrize("value", [
    b'{"verdict_id": "x", "cost_usd": Infinity}', b'{"verdict_id": "x", "cost_usd": 1e999}',
    b'{"verdict_id": "x", "cost_usd": "inf"}', b'{"verdict_id": "x", "cost_usd": true}',
    b'{"verdict_id": "x", "cost_usd": NaN}', b'{"verdict_id": "x", "cost_usd": -5}',
    b'{"verdict_id": "x", "cost_usd": 1000000}', b'{"verdict_id": 7, "cost_usd": 0.1}',
    b'{"cost_usd": 0.1}', b'[{"cost_usd": 0.1}]', b"\xff\xfe cost_usd", b"",
], ids=lambda value: value.decode(errors="replace")[:40])
def test_another_producers_junk_costs_nothing(value: bytes) -> None:
    """Read by every replica from midnight on, one junk cost would stop the fleet all day."""
    budget = DailyBudget(20.0)
    spend = FleetSpend(None, "verdicts", budget)  # no reader needed
    spend.count(value, int(time.time() * 1000))
    assert budget.spent_usd == 0.0


def test_a_verdicts_cost_counts() -> None:
    budget = DailyBudget(20.0)
    spend = FleetSpend(None, "verdicts", budget)
    spend.count(b'{"verdict_id": "v", "cost_usd": 0.25, "rule": "groundedness"}',
                int(time.time() * 1000))
    assert budget.spent_usd == 0.25


def test_own_calls_counted_apart_until_read_back_add_up_exactly() -> None:
    """The running sums the budget keeps (one read back costs no sum over all unread):
    50,000 calls answered, then read back, leave exactly the topic's total."""
    budget = DailyBudget(1e9)
    now_ms = int(time.time() * 1000)
    for n in range(50_000):
        budget.start(f"v{n}", 0.02)
        budget.answered(f"v{n}", 0.01)
    assert budget.spent_usd == pytest.approx(500.0)
    for n in range(50_000):
        budget.seen(f"v{n}", 0.01, now_ms)
    assert budget.spent_usd == pytest.approx(500.0), "read back: counted once"


class FailingReader:
    """A reader whose broker fails once mid-reading, then serves one verdict."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.calls = 0
        self.stop = stop

    async def getmany(self, timeout_ms: int, max_records: int) -> dict[str, list[Record]]:
        self.calls += 1
        if self.calls == 1:
            raise KafkaConnectionError("broker gone")
        self.stop.set()
        value = b'{"verdict_id": "v", "cost_usd": 0.5}'
        return {"tp": [Record(value, int(time.time() * 1000))]}


@dataclass
class Record:
    value: bytes
    timestamp: int


async def test_a_broker_failure_while_following_is_retried_not_fatal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet_spend, "RETRY_S", 0.01)
    stop = asyncio.Event()
    budget = DailyBudget(20.0)
    spend = FleetSpend(FailingReader(stop), "verdicts", budget)
    spend._assigned = {"tp"}  # already assigned: the next look is 30 s away
    spend._looked_at = time.monotonic()
    with capture_logs() as logs:
        await asyncio.wait_for(spend.follow(stop), timeout=5)
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
        "judge_budget_read_failed"]
    assert budget.spent_usd == 0.5, "read on after the failure"
