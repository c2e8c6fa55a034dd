"""The budget's reading of the results topic: what counts as a cost, and what it costs the
event loop to read its own verdicts back."""

from __future__ import annotations

import time

import pytest

from consumer.cost.daily_budget import DailyBudget
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
