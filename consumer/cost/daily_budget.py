"""``JUDGE_BUDGET_USD_PER_DAY``: what the fleet spent on the judge today (UTC), and whether one
more call may start (pure, but for the clock, a metric and a log line a day).

Every replica publishes its verdicts, each with its ``cost_usd``, to the results topic; each
follows that topic from the day's first offset (``pipeline/fleet_spend.py``) and tells its
budget every cost it reads (``seen``). Its own calls count from the moment they start: at
their estimate while in flight (the prompt's estimated tokens and the whole answer allowance,
about the most a call costs), at their cost once answered, until their verdict is read back
from the topic and counted with everyone's. A call may start while that sum is below the cap,
and at most ``max_calls`` (``JUDGE_MAX_CONCURRENCY``) are counted in flight at once (``slot``):
so the day's spend stops past the cap by at most what the other replicas had in flight, or
answered and not yet published, when this one read the topic last (docs/cost-controls.md says
how much that is). A verdict never published (its partition moved, its transaction aborted)
stays counted: its call was paid for.

At midnight UTC the day starts over and judging resumes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from consumer.ops import metrics

log = structlog.get_logger(__name__)

DAY_S = 86_400


class OverBudget(Exception):  # a state, not a failure: the trace is skipped
    """Today's judge budget is spent: the call is not made."""


class DailyBudget:
    """The fleet's spend today, and this replica's calls not yet read back."""

    def __init__(self, cap_usd: float, max_calls: int = 16,
                 clock: Callable[[], float] = time.time) -> None:
        self.cap_usd = cap_usd
        # The judge's own concurrency: a call waiting for it is not yet counted, so the calls
        # counted in flight, the others' overshoot, stay as few as the judge can run.
        self.slot = asyncio.Semaphore(max_calls)
        self._clock = clock
        self._day = self._today()
        self._seen_usd = 0.0  # the day's verdicts read from the results topic
        self._flying: dict[str, float] = {}  # verdict id -> estimate, while its call runs
        self._unread: dict[str, float] = {}  # verdict id -> cost, answered, not yet read back
        # Their sums, kept as they change: summed anew per record read, a reader behind by
        # thousands of verdicts would cost the event loop seconds.
        self._flying_usd = 0.0
        self._unread_usd = 0.0
        self._reached = False  # said once a day
        self._remaining = metrics.budget_remaining()
        self._remaining.set(cap_usd)

    def day_start_ms(self) -> int:
        """Midnight UTC today, in epoch milliseconds: where the results topic is read from."""
        return self._today() * DAY_S * 1000

    @property
    def spent_usd(self) -> float:
        """Today's spend: the fleet's verdicts read, and this replica's not yet read back."""
        self._roll()
        return self._seen_usd + self._flying_usd + self._unread_usd

    def start(self, verdict_id: str, estimate_usd: float) -> None:
        """Count a call about to start at its estimate; OverBudget once the cap is reached."""
        spent = self.spent_usd
        if spent >= self.cap_usd:
            if not self._reached:
                self._reached = True
                log.warning("judge_budget_reached", cap_usd=self.cap_usd,
                            spent_usd=round(spent, 6),
                            hint="no judge calls until midnight UTC: skipped{reason=\"budget\"}; "
                                 "`groundedness replay` can judge the window later")
            raise OverBudget
        self._flying_usd += estimate_usd - self._flying.get(verdict_id, 0.0)
        self._flying[verdict_id] = estimate_usd
        self._changed()

    def answered(self, verdict_id: str, cost_usd: float) -> None:
        """A started call's estimate becomes its cost (0: it ended before any was spent)."""
        self._flying_usd -= self._flying.pop(verdict_id, 0.0)
        if cost_usd:
            self._unread[verdict_id] = self._unread.get(verdict_id, 0.0) + cost_usd
            self._unread_usd += cost_usd
        self._changed()

    def seen(self, verdict_id: str, cost_usd: float, timestamp_ms: int) -> None:
        """A verdict read from the results topic: today's cost counts, and one of this
        replica's own is no longer counted apart."""
        self._roll()
        self._unread_usd -= self._unread.pop(verdict_id, 0.0)
        if timestamp_ms // 1000 // DAY_S == self._day:
            self._seen_usd += cost_usd
        self._changed()

    def refresh(self) -> None:
        """The gauge as of now (past midnight: the new day's)."""
        self._changed()

    def _changed(self) -> None:
        # Emptied, a sum is exactly 0 again: no float drift carried over a day of calls.
        if not self._flying:
            self._flying_usd = 0.0
        if not self._unread:
            self._unread_usd = 0.0
        self._remaining.set(self.cap_usd - self.spent_usd)

    def _roll(self) -> None:
        today = self._today()
        if today != self._day:
            if self._reached:
                log.info("judge_budget_renewed", cap_usd=self.cap_usd)
            # Yesterday's answers are yesterday's spend, read back or not; the calls in flight
            # will be published today, and count today.
            self._day, self._seen_usd, self._reached = today, 0.0, False
            self._unread.clear()
            self._unread_usd = 0.0

    def _today(self) -> int:
        return int(self._clock()) // DAY_S
