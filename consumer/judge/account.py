"""What the judge's account has left, read from the rate-limit headers of a response (pure).

OpenAI, Azure OpenAI and LiteLLM send these on every response, 200 and 429 alike:
``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests``,
``x-ratelimit-reset-requests`` and the same three for ``-tokens``. The limits are the
account's (every replica of the worker shares them); ``reset`` is how long until the budget is
whole again, written ``1s``, ``6m0s``, ``12ms``, ``1.5s``. Endpoints that send none (vLLM, many
gateways) read as ``None``: their 429s and ``Retry-After`` are all there is to go by.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
MAX_RESET_S = 24 * 3600.0  # a header claiming longer is not believed


@dataclass(frozen=True, slots=True)
class Budget:
    """One of the account's limits as a response saw it."""

    limit: int
    remaining: int
    reset_s: float | None  # until the budget is whole again; None when not said

    @property
    def left(self) -> float:
        """The share of the limit left, 0 to 1."""
        return min(1.0, max(0.0, self.remaining / self.limit))


@dataclass(frozen=True, slots=True)
class AccountState:
    """The account's requests and tokens budgets (each None when the endpoint did not say)."""

    requests: Budget | None
    tokens: Budget | None

    @property
    def left(self) -> float:
        """The share left of whichever budget is the tighter one."""
        return min(budget.left for budget in (self.requests, self.tokens) if budget is not None)


def read_account(headers: Mapping[str, str]) -> AccountState | None:
    """The account's budgets from a response's headers; None when it sent none usable."""
    requests, tokens = _budget(headers, "requests"), _budget(headers, "tokens")
    if requests is None and tokens is None:
        return None
    return AccountState(requests, tokens)


def parse_duration(text: str) -> float | None:
    """``1s``, ``6m0s``, ``12ms``, ``1.5s``, ``1h2m3s`` (Go's duration format), or plain
    seconds -> seconds; None when it is neither."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        position, seconds = 0, 0.0
        for match in _PART.finditer(text):
            if match.start() != position:
                return None
            seconds += float(match.group(1)) * _UNIT_S[match.group(2)]
            position = match.end()
        if position == 0 or position != len(text):
            return None
    if not 0 <= seconds <= MAX_RESET_S:
        return None
    return seconds


def _budget(headers: Mapping[str, str], what: str) -> Budget | None:
    limit = _count(headers.get(f"x-ratelimit-limit-{what}"))
    remaining = _count(headers.get(f"x-ratelimit-remaining-{what}"))
    if limit is None or remaining is None or limit <= 0:
        return None
    reset = headers.get(f"x-ratelimit-reset-{what}")
    return Budget(limit, min(remaining, limit), None if reset is None else parse_duration(reset))


def _count(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return max(0, int(float(text.strip())))
    except ValueError:
        return None
