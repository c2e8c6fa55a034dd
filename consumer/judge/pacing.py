"""Pacing this replica's judge calls so that all replicas together stay under the account's
limits, without talking to each other.

Every replica reads the same account from the headers of its own responses (``account.py``):
the share of the tighter budget left. That share is the account's bucket, refilled at the
limit's rate and drained by every replica's calls, so its slope tells each replica, alone,
how fast all of them together are calling: the refill less the slope. Every ``STEP_S`` each
replica scales its own pace by the square root of the ratio of the target to that total,
so the sum of their paces moves halfway to the target each step whatever their number. The
target is the refill, more while the bucket is fuller than ``SETPOINT`` and less while it is
emptier, so the bucket settles half full: never empty (no 429s), never full (no refill
wasted), and the replicas together use what the account refills. A 429 for a rate limit
halves the pace at once.

An endpoint that sends no headers is paced by its 429s alone, through the same loop: no pace
until 429s answer more than ``LIMITED_SHARE`` of this replica's recent calls, then half the
pace that met them, rising again by ``RISE_PER_S`` of that pace each second, never past it,
until they do again. A share, not any 429: without headers a 429 cannot say whether it is
the account's pace or a passing refusal (a gateway's, one prompt's), and halving on every
one would let a few such 429s a second bring the pace down to nothing; each of them still
holds every call for its ``Retry-After`` (``ratelimit.py``). ``JUDGE_REQUESTS_PER_MINUTE`` and
``JUDGE_TOKENS_PER_MINUTE`` stay a ceiling per replica (``ratelimit.py``, behind this gate).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from consumer.judge.account import AccountState

SETPOINT = 0.1  # the share of the account's budget the pacing keeps left
FIRST_SHARE = 0.25  # the least first pace, as a share of the refill (an account found empty)
GAIN = 1.0  # how hard the bucket's distance from the setpoint moves the target
STEP_S = 2.0  # the pace changes at most this often: the slope is measured over it
MAX_STEP = (0.5, 1.5)  # the most one step scales the pace down or up
DAMPING = 0.5  # the share of the correction (as a power of the ratio) one step makes
RATE_LIMITED = 0.5  # the pace after a 429 for a rate limit
RATE_LIMITED_GAP_S = 1.0  # one halving per this long: the 429s of calls already out say the same
RISE_PER_S = 0.01  # without headers: the rise each second, as a share of the reference
MIN_SHARE = 0.01  # the pace never falls under this share of the account's refill
SENT_WINDOW_S = 5.0  # how far back this replica's pace and 429s are measured (no headers)
LIMITED_SHARE = 0.25  # without headers: 429s on more than this share of recent calls slow it
MIN_LIMITED = 3  # ... and at least this many of them
MAX_SLEEP_S = 0.25  # a waiting call looks again at least this often: the pace may have risen


class Pacer:
    """One replica's pace of judge calls (calls per second); None while not paced."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.rate: float | None = None
        self.account: AccountState | None = None  # as the latest response saw it
        self._refill: float | None = None  # the account's refill per second, or a guess
        self._step: tuple[float, float] | None = None  # (when, share left) at the last step
        self._halved_at = -float("inf")
        self._rose_at: float | None = None
        self._released_at = -float("inf")  # when the latest call was let go
        self._sent: deque[float] = deque()  # this replica's recent calls
        self._limited: deque[float] = deque()  # and the rate-limit 429s among them
        self._turn = asyncio.Lock()  # callers go one at a time, first come first

    def release_in_s(self) -> float:
        """0 when a call may go now (it is counted gone), else how long until one may, at
        the pace as it is now: a change of pace applies to the very next call, not after
        the turns of calls already waiting."""
        now = self._clock()
        if self.rate is not None:
            due = self._released_at + 1 / self.rate
            if now < due:
                return due - now
            # Keep the spacing exact under load; after an idle spell, start from now.
            self._released_at = due if now - due < 1 / self.rate else now
        self._sent.append(now)
        while self._sent[0] < now - SENT_WINDOW_S:
            self._sent.popleft()
        return 0.0

    async def wait_turn(self) -> None:
        """Wait for this call's turn (callers in the order they came)."""
        if self.rate is None:
            self.release_in_s()
            return
        async with self._turn:
            # A loop, not one sleep: the pace may change while this call waits.
            while (wait_s := self.release_in_s()) > 0:  # noqa: ASYNC110
                await asyncio.sleep(min(wait_s, MAX_SLEEP_S))

    def observe(self, account: AccountState | None) -> None:
        """A response's headers (200 or 429): steer by the account's bucket."""
        if account is None:
            self._rise()  # no headers: rise while no 429 says otherwise
            return
        self.account = account
        if account.requests is None:
            return  # a tokens budget alone: paced by 429s, within the token ceiling
        now, left = self._clock(), account.left
        self._refill = account.requests.limit / 60
        if self.rate is None:
            # All of it, were this replica alone; as much less as the bucket is emptier than
            # twice the setpoint, when others are already drawing on it (a replica joining
            # a busy account must not start at the whole refill).
            self.rate = self._refill * min(1.0, max(FIRST_SHARE, left / (2 * SETPOINT)))
        if self._step is None:  # the first headers: the slope is measured from here
            self._step = (now, left)
            return
        since, was = self._step
        if now - since < STEP_S:
            return
        # The bucket's slope (shares of the budget per second) is the refill less every
        # replica's calls together: 1/60 of the budget a second refills it.
        slope = (left - was) / (now - since)
        total = max(self._refill * (1 - 60 * slope), MIN_SHARE * self._refill)
        target = self._refill * max(0.0, 1 + GAIN * (left - SETPOINT))
        # Half the correction each step (in ratio): the last step's change shows in the slope
        # only partly yet, and every replica corrects at once.
        scale = min(MAX_STEP[1], max(MAX_STEP[0], (target / total) ** DAMPING))
        self.rate = min(self._refill, max(MIN_SHARE * self._refill, self.rate * scale))
        self._step = (now, left)

    def rate_limited(self) -> None:
        """A 429 for a rate limit: with headers, the account is over, whatever they said;
        without, when such 429s answer a large share of the recent calls."""
        now = self._clock()
        self._limited.append(now)
        while self._limited[0] < now - SENT_WINDOW_S:
            self._limited.popleft()
        if self.account is None and (
                len(self._limited) < MIN_LIMITED
                or len(self._limited) <= LIMITED_SHARE * len(self._sent)):
            return
        if now - self._halved_at < RATE_LIMITED_GAP_S:
            return
        self._halved_at = self._rose_at = now
        if self.rate is None:  # no headers to go by: start from this replica's own pace
            span_s = max(1.0, now - self._sent[0]) if self._sent else SENT_WINDOW_S
            self.rate = max(len(self._sent) / span_s, 0.1)
        if self.account is None:  # no headers: the pace that met the 429 is the reference
            self._refill = self.rate
        self.rate = max(MIN_SHARE * (self._refill or self.rate), self.rate * RATE_LIMITED)

    def _rise(self) -> None:
        now = self._clock()
        if self.rate is None or self._refill is None:
            return
        if self._rose_at is not None:
            self.rate = min(self._refill, self.rate
                            + RISE_PER_S * self._refill * (now - self._rose_at))
        self._rose_at = now
