"""Requests- and tokens-per-minute limits on judge calls, and Retry-After holds.

Every judge attempt, retries and probes included, acquires here first. Both limits keep the
same promise: in no 60 s window do the calls admitted exceed the configured rate.

- Requests: aiolimiter's leaky bucket, one second deep (a bucket a minute deep would let a
  burst after idling double the rate), its drain scaled so depth plus 60 s of drain fits.
- Tokens: a sliding-window ledger (``TokenWindow``) instead. A bucket cannot keep that
  promise here: to admit one call at all it must be at least a call deep (thousands of
  tokens, not a second's worth), a full deep bucket after an idle spell plus its drip admits
  up to twice the limit in one window, and what a bucket has admitted it cannot take back when
  the judge reports that a call used fewer (or more) tokens than estimated. The ledger keeps
  each call's estimate with its time and corrects it to the usage reported, so the window
  sums what calls really cost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass

from aiolimiter import AsyncLimiter

WINDOW_S = 60.0
# Capacity of one second plus a drain of rate r admits at most r/60 + r per 60 s, so the
# drain is scaled to keep any 60 s window within the configured requests_per_minute: 60/61
# is the exact edge (measured: 1,201 calls in one window at 1,200/min), 60/62 leaves a margin
# for timer jitter and still uses 97% of the limit.
_WINDOW_SAFETY = 60 / 62


@dataclass(slots=True)
class Spend:
    """One call's tokens in the ledger: the estimate until the judge reports its usage."""

    at: float
    tokens: int
    in_window: bool = True


class TokenWindow:
    """The tokens admitted in the last 60 s (pure: the caller passes the time).

    Admitting a call only when the window ``(now - 60, now]`` holds at most ``limit`` with
    it means every such window, wherever it ends, holds at most ``limit`` (the last call in
    it was admitted under the same check, and saw all the window's earlier calls).
    """

    def __init__(self, limit: int, window_s: float = WINDOW_S) -> None:
        self.limit = limit
        self._window_s = window_s
        self._spends: deque[Spend] = deque()
        self._total = 0

    def used(self, now: float) -> int:
        """Tokens counted in the window ending now."""
        self._expire(now)
        return self._total

    def wait_s(self, now: float, tokens: int) -> float:
        """0 if a call of ``tokens`` fits now, else how long until enough of the window's
        calls have left it (``tokens`` must not exceed the limit)."""
        excess = self.used(now) + tokens - self.limit
        if excess <= 0:
            return 0.0
        for spend in self._spends:  # oldest first: the order they leave the window
            excess -= spend.tokens
            if excess <= 0:
                return spend.at + self._window_s - now
        return self._window_s  # only if ``tokens`` alone exceeds the limit

    def spend(self, now: float, tokens: int) -> Spend:
        """Count a call admitted now."""
        spend = Spend(now, tokens)
        self._spends.append(spend)
        self._total += tokens
        return spend

    def settle(self, spend: Spend, tokens: int) -> None:
        """Replace a call's estimate with the tokens it really used."""
        if spend.in_window:
            self._total += tokens - spend.tokens
        spend.tokens = tokens

    def _expire(self, now: float) -> None:
        while self._spends and self._spends[0].at + self._window_s <= now:
            spend = self._spends.popleft()
            spend.in_window = False
            self._total -= spend.tokens


class JudgeLimiter:
    """Admits judge calls within the configured rates; a Retry-After holds everyone."""

    def __init__(self, requests_per_minute: int | None, tokens_per_minute: int | None) -> None:
        self._requests: AsyncLimiter | None = None
        if requests_per_minute:
            per_second = requests_per_minute / 60 * _WINDOW_SAFETY
            capacity = max(1.0, per_second)
            self._requests = AsyncLimiter(capacity, capacity / per_second)
        self._tokens = TokenWindow(tokens_per_minute) if tokens_per_minute else None
        self._hold_until = 0.0
        self._turn = asyncio.Lock()  # callers are admitted one at a time, first come first
        self._settled = asyncio.Event()  # a settle may have freed tokens: look again

    @property
    def tokens_per_minute(self) -> int | None:
        """The token limit, if any."""
        return self._tokens.limit if self._tokens else None

    def fits(self, tokens: int) -> bool:
        """Could a call of ``tokens`` ever be admitted? (Not if it exceeds the whole limit.)"""
        return self._tokens is None or tokens <= self._tokens.limit

    def tokens_in_window(self) -> int:
        """Tokens counted in the last 60 s (estimates, corrected by reported usage)."""
        now = asyncio.get_running_loop().time()
        return self._tokens.used(now) if self._tokens else 0

    async def acquire(self, tokens: int) -> Spend | None:
        """Wait until one call of about ``tokens`` tokens may start; the returned spend is
        to be settled with the usage the judge reports."""
        if self._requests is None and self._tokens is None:
            await self._wait_for_hold()
            return None
        loop = asyncio.get_running_loop()
        async with self._turn:
            # Step 1: wait out any Retry-After and until the tokens fit, looking again after
            # each wait (another Retry-After may come, a settled call may free tokens early).
            while True:
                await self._wait_for_hold()
                if self._tokens is None:
                    break
                tokens = min(tokens, self._tokens.limit)  # callers check ``fits`` first
                if (wait_s := self._tokens.wait_s(loop.time(), tokens)) <= 0:
                    break
                self._settled.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._settled.wait(), wait_s)
            # Step 2: the request limit. Step 3: the tokens, counted at the instant the
            # request is (no await between them), so neither limit counts a call at a time
            # other than when it goes out. Tokens only free up during step 2, unless a call
            # reported more than its estimate: that excess is already spent either way.
            if self._requests is not None:
                await self._requests.acquire()
            return self._tokens.spend(loop.time(), tokens) if self._tokens else None

    def settle(self, spend: Spend | None, tokens: int) -> None:
        """Correct a call's estimate to the prompt + completion tokens it really used."""
        if spend is not None and self._tokens is not None:
            self._tokens.settle(spend, tokens)
            self._settled.set()

    def hold(self, seconds: float) -> None:
        """The judge asked everyone to wait (429 Retry-After): no call starts before then."""
        now = asyncio.get_running_loop().time()
        self._hold_until = max(self._hold_until, now + seconds)

    async def _wait_for_hold(self) -> None:
        loop = asyncio.get_running_loop()
        # A loop, not one sleep: another Retry-After may extend the hold while we wait.
        while (delay := self._hold_until - loop.time()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(delay)
