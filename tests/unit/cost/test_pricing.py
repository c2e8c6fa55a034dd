"""JUDGE_PRICE_*: a verdict's cost from the judge's usage, totals kept at full precision, and
rounding only where a person reads them."""

from __future__ import annotations

import pytest

from consumer.cost.pricing import CostTally, Prices, cost_usd, format_usd
from schemas.verdict import Usage

# gpt-4o-mini's list prices, USD per million tokens.
INPUT, OUTPUT = 0.15, 0.60
TYPICAL = Usage(prompt_tokens=900, completion_tokens=40, total_tokens=940)


def test_a_verdicts_cost_is_its_tokens_at_the_prices() -> None:
    assert cost_usd(TYPICAL, INPUT, OUTPUT) == pytest.approx(0.000159, rel=1e-12)
    million_in = Usage(prompt_tokens=1_000_000, completion_tokens=0, total_tokens=1_000_000)
    assert cost_usd(million_in, INPUT, OUTPUT) == pytest.approx(INPUT, rel=1e-12)
    million_out = Usage(prompt_tokens=0, completion_tokens=1_000_000, total_tokens=1_000_000)
    assert cost_usd(million_out, INPUT, OUTPUT) == pytest.approx(OUTPUT, rel=1e-12)


def test_prompt_tokens_the_providers_cache_served_cost_the_cached_price() -> None:
    """OpenAI bills cached prompt tokens at a discount: 1,000 prompt tokens of which 800
    cached, 100 completion, at 1.00 / 0.25 / 4.00 USD per million."""
    usage = Usage(prompt_tokens=1_000, completion_tokens=100, total_tokens=1_100,
                  cached_tokens=800)
    assert Prices(1.0, 4.0, 0.25).cost_usd(usage) == pytest.approx(
        (200 * 1.0 + 800 * 0.25 + 100 * 4.0) / 1e6)
    assert Prices(1.0, 4.0).cost_usd(usage) == pytest.approx((1_000 * 1.0 + 100 * 4.0) / 1e6), \
        "no cached price: the input price"
    odd = Usage(prompt_tokens=10, cached_tokens=50)  # a server that says more than it sent
    assert Prices(1.0, 4.0, 0.0).cost_usd(odd) == 0.0


def test_a_verdict_without_cached_tokens_is_the_json_it_was() -> None:
    assert "cached_tokens" not in Usage(prompt_tokens=5).model_dump_json()
    assert '"cached_tokens":3' in Usage(prompt_tokens=5, cached_tokens=3).model_dump_json()


def test_a_cached_answer_costs_nothing() -> None:
    assert cost_usd(Usage(), INPUT, OUTPUT) == 0.0


@pytest.mark.parametrize(("usage", "prices"), [
    (None, (INPUT, OUTPUT)),  # the judge reported no usage
    (TYPICAL, (None, None)),  # no prices configured
    (TYPICAL, (INPUT, None)),  # half a price would look like a whole, too low, cost
    (TYPICAL, (None, OUTPUT)),
])
def test_no_cost_without_usage_or_both_prices(
        usage: Usage | None, prices: tuple[float | None, float | None]) -> None:
    assert cost_usd(usage, *prices) is None


def test_free_prices_are_a_cost_of_zero_not_unknown() -> None:
    assert cost_usd(TYPICAL, 0.0, 0.0) == 0.0


def test_a_tally_keeps_full_precision_where_rounding_each_verdict_would_lose_it() -> None:
    tally = CostTally()
    cost = cost_usd(TYPICAL, INPUT, OUTPUT)
    for _ in range(100_000):
        tally.add(TYPICAL, cost)
    assert round(0.000159, 2) == 0.0  # what rounding each verdict would have summed
    assert tally.cost_usd == pytest.approx(15.9, rel=1e-9)
    assert format_usd(tally.cost_usd) == "$15.90"
    assert (tally.verdicts, tally.prompt_tokens, tally.completion_tokens) == (100_000,
                                                                             90_000_000, 4_000_000)
    assert tally.total_tokens == 94_000_000


def test_a_tally_without_prices_counts_tokens_and_knows_no_cost() -> None:
    tally = CostTally()
    tally.add(TYPICAL, None)
    tally.add(None, None)  # an error verdict from a judge that reported no usage
    assert (tally.verdicts, tally.prompt_tokens, tally.completion_tokens) == (2, 900, 40)
    assert tally.cost_usd is None
    assert format_usd(tally.cost_usd) == "—"


def test_a_tally_of_cached_verdicts_costs_zero_not_unknown() -> None:
    tally = CostTally()
    tally.add(Usage(), cost_usd(Usage(), INPUT, OUTPUT))
    assert tally.cost_usd == 0.0
    assert format_usd(tally.cost_usd) == "$0.00"


@pytest.mark.parametrize(("cost", "shown"), [
    (0.0, "$0.00"),
    (0.000159, "$0.000159"),
    (0.0123, "$0.0123"),
    (0.5, "$0.500"),
    (1.0, "$1.00"),
    (1234.567, "$1,234.57"),
    (1e-7, "$0.000000100"),
])
def test_display_rounds_to_what_a_person_reads(cost: float, shown: str) -> None:
    assert format_usd(cost) == shown
