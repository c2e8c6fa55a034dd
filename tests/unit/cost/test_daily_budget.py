"""JUDGE_BUDGET_USD_PER_DAY's accounting: the fleet's spend read from the topic, this
replica's own calls counted from their start until read back, the cap, and midnight UTC."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from consumer.cost.daily_budget import DAY_S, DailyBudget, OverBudget
from consumer.ops.metrics import REGISTRY

NOON = 20_000 * DAY_S + DAY_S // 2  # a day's noon, UTC, in epoch seconds


class Clock:
    def __init__(self, now: float = NOON) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def remaining() -> float | None:
    return REGISTRY.get_sample_value("groundedness_budget_remaining_usd")


def test_calls_start_until_the_spend_seen_and_in_flight_reaches_the_cap() -> None:
    budget = DailyBudget(1.0, clock=Clock())
    budget.seen("other-1", 0.6, NOON * 1000)  # another replica's verdict, read from the topic
    budget.start("mine-1", 0.3)  # 0.9 spent: one more may start
    budget.start("mine-2", 0.3)
    with pytest.raises(OverBudget):
        budget.start("mine-3", 0.01)
    assert budget.spent_usd == pytest.approx(1.2)
    assert remaining() == pytest.approx(-0.2)


def test_an_answer_replaces_its_estimate_and_reading_it_back_counts_it_once() -> None:
    budget = DailyBudget(1.0, clock=Clock())
    budget.start("mine-1", 0.5)
    budget.answered("mine-1", 0.1)
    assert budget.spent_usd == pytest.approx(0.1)
    budget.seen("mine-1", 0.1, NOON * 1000)  # its verdict, back from the topic
    assert budget.spent_usd == pytest.approx(0.1), "not counted twice"
    budget.start("mine-2", 0.5)
    budget.answered("mine-2", 0.0)  # ended before anything was spent (a stop)
    assert budget.spent_usd == pytest.approx(0.1)


def test_yesterdays_verdicts_do_not_count_and_midnight_starts_over() -> None:
    clock = Clock()
    budget = DailyBudget(1.0, clock=clock)
    budget.seen("old", 5.0, (NOON - DAY_S) * 1000)  # read from before midnight
    assert budget.spent_usd == 0.0
    assert budget.day_start_ms() == (NOON - DAY_S // 2) * 1000
    budget.seen("today", 1.0, NOON * 1000)
    with capture_logs() as logs, pytest.raises(OverBudget):
        budget.start("refused", 0.2)
    with capture_logs() as again, pytest.raises(OverBudget):
        budget.start("refused-too", 0.2)
    assert [entry["event"] for entry in logs] == ["judge_budget_reached"]
    assert again == [], "said once a day"
    clock.now += DAY_S  # the next day's noon
    with capture_logs() as renewed:
        budget.start("tomorrow", 0.2)
    assert [entry["event"] for entry in renewed] == ["judge_budget_renewed"]
    assert budget.spent_usd == pytest.approx(0.2)


def test_a_call_in_flight_at_midnight_counts_on_the_day_it_is_published() -> None:
    clock = Clock(NOON + DAY_S // 2 - 1)  # a second to midnight
    budget = DailyBudget(1.0, clock=clock)
    budget.start("late", 0.4)
    budget.answered("answered-late", 0.3)  # answered before midnight, not yet read back
    clock.now += 2
    assert budget.spent_usd == pytest.approx(0.4), "in flight: today's; answered: yesterday's"
