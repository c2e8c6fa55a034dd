"""How far a batch replay has got: requests done and failed, and when it should end (pure).

The expected finish comes from each running batch's own rate since it started answering
(``in_progress_at``); batches run side by side, so the replay ends with its slowest one. Before
every running batch has answered something there is no rate to go by: no estimate, only the
deadline OpenAI gives (``expires_at``, 24 h after creation).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from openai.types import Batch

RUNNING = frozenset({"validating", "in_progress", "finalizing", "cancelling"})


@dataclass(frozen=True, slots=True)
class Progress:
    """One look at a batch replay."""

    done: int  # requests answered
    failed: int  # requests the batches answered with an error
    total: int  # requests in the replay's batches
    running: int  # batches not finished yet
    expected_finish: float | None  # epoch seconds; None until every running batch has a rate
    deadline: float | None  # epoch seconds: the latest a running batch may end (expires_at)


def progress_of(
    batches: Iterable[Batch], total: int, now: float, done_before: int = 0
) -> Progress:
    """The progress of ``batches`` (their latest state), ``total`` requests in all, of which
    ``done_before`` were finished by an earlier run (their batches are not looked at again)."""
    done, failed, running = done_before, 0, 0
    finishes: list[float | None] = []
    deadlines: list[float] = []
    for batch in batches:
        counts = batch.request_counts
        if counts is not None:
            done += counts.completed
            failed += counts.failed
        if batch.status not in RUNNING:
            continue
        running += 1
        if batch.expires_at is not None:
            deadlines.append(float(batch.expires_at))
        finishes.append(_finish(batch, now))
    known = [f for f in finishes if f is not None]
    expected = max(known) if known and len(known) == len(finishes) else None
    return Progress(done, failed, total, running, expected, max(deadlines, default=None))


def _finish(batch: Batch, now: float) -> float | None:
    """When ``batch`` should end at the rate it has answered so far."""
    counts = batch.request_counts
    if counts is None or batch.in_progress_at is None:
        return None
    answered = counts.completed + counts.failed
    elapsed = now - batch.in_progress_at
    if answered >= counts.total > 0:
        return now  # every request answered: finalizing
    if answered == 0 or elapsed <= 0:
        return None
    return now + (counts.total - answered) * elapsed / answered
