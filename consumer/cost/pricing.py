"""``JUDGE_PRICE_INPUT_PER_MILLION`` / ``JUDGE_PRICE_OUTPUT_PER_MILLION``: what a verdict
cost, and the totals a summary shows (pure).

A cost is computed from the tokens the judge reported (``Usage``) at full float precision and
summed so; only ``format_usd`` rounds, for display. Rounding each verdict first would lose
real money: a million verdicts at $0.0004 each are $400, not $0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from schemas.verdict import Usage

# gpt-4o-mini's input price (USD per million tokens, OpenAI's list price when written), put on
# every estimated token, answer allowance included: a rough guess, where the configured prices
# price the prompt and the answer each at its own rate.
DEFAULT_PRICE_PER_MILLION_TOKENS = 0.15
# Where a dry run's prices come from: its summary's ``prices.from``.
CONFIGURED_PRICES = "JUDGE_PRICE_*"
FALLBACK_PRICE = "--price-per-million-tokens"

PER = 1_000_000


def cost_usd(usage: Usage | None, input_per_million: float | None,
             output_per_million: float | None,
             cached_input_per_million: float | None = None) -> float | None:
    """USD for the tokens of ``usage`` at the prices, the prompt tokens the provider's cache
    served at the cached price (the input price when none is given); None without usage or
    without both prices (a cost with one side missing would look complete and be too low)."""
    if usage is None or input_per_million is None or output_per_million is None:
        return None
    cached = min(usage.cached_tokens, usage.prompt_tokens)
    cached_price = input_per_million if cached_input_per_million is None else (
        cached_input_per_million)
    return ((usage.prompt_tokens - cached) * input_per_million + cached * cached_price
            + usage.completion_tokens * output_per_million) / PER


@dataclass(frozen=True, slots=True)
class Prices:
    """``JUDGE_PRICE_INPUT_PER_MILLION``, ``JUDGE_PRICE_OUTPUT_PER_MILLION`` and
    ``JUDGE_PRICE_CACHED_INPUT_PER_MILLION`` (None: the input price), in USD."""

    input_per_million: float
    output_per_million: float
    cached_input_per_million: float | None = None

    def cost_usd(self, usage: Usage | None) -> float | None:
        """USD for the tokens of ``usage``; None without usage."""
        return cost_usd(usage, self.input_per_million, self.output_per_million,
                        self.cached_input_per_million)


@dataclass(slots=True)
class CostTally:
    """Tokens and cost over many verdicts, for a replay's summary or a dry run's estimate."""

    verdicts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None  # None until a verdict with a cost is added

    def add(self, usage: Usage | None, cost: float | None) -> None:
        """One verdict's usage (None: the judge reported none) and cost (None: no prices)."""
        self.verdicts += 1
        if usage is not None:
            self.prompt_tokens += usage.prompt_tokens
            self.completion_tokens += usage.completion_tokens
        if cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost

    @property
    def total_tokens(self) -> int:
        """Prompt and completion tokens together."""
        return self.prompt_tokens + self.completion_tokens


def format_usd(cost: float | None) -> str:
    """A cost for a person: cents from a dollar up, three significant digits below it, a dash
    for no cost known."""
    if cost is None:
        return "—"
    if cost == 0 or abs(cost) >= 1:
        return f"${cost:,.2f}"
    # Fixed notation (no "1e-05" in a table), decimals enough for three significant digits.
    decimals = max(2, 2 - math.floor(math.log10(abs(cost))))
    return f"${cost:.{decimals}f}"
