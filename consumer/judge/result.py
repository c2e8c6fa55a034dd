"""What a judge returns for one trace, and the ``Judge`` protocol that returns it.

A result is a value, one of two:

    Answered      the judge's answer (a pass or fail verdict, once the threshold is applied)
    TraceFailed   this trace could not be scored: its error kind and message (an ``error``
                  verdict); data, not an exception

Both carry what the evaluation cost, and the model that answered as the endpoint named it in
its response (``model``: a snapshot such as ``gpt-4o-mini-2024-07-18`` for ``gpt-4o-mini``,
or whatever an OpenAI-compatible server answers as; None when no response named one: the
verdict then names the model asked for, ``JUDGE_MODEL``). An outage is neither:
``Judge.judge`` raises ``JudgeUnavailable`` for it, and the caller holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeAlias

from consumer.judge.prompt import JudgeRequest
from schemas.judge import JudgeAnswer
from schemas.verdict import Usage


@dataclass(frozen=True, slots=True)
class Answered:
    """The judge answered: its answer, and what the evaluation cost."""

    answer: JudgeAnswer
    usage: Usage | None
    latency_ms: int
    attempts: int
    model: str | None = None  # the responding model; None: as asked


@dataclass(frozen=True, slots=True)
class TraceFailed:
    """The judge could not score this trace (not an outage): why, and what it cost."""

    kind: str  # e.g. ``judge_http_400``, ``unparseable_answer``: the verdict's error type
    message: str
    usage: Usage | None
    latency_ms: int
    attempts: int
    model: str | None = None  # the model of the last response, if any answered at all


JudgeResult: TypeAlias = Answered | TraceFailed


class Judge(Protocol):
    """Scores one prepared request; raises ``JudgeUnavailable`` only during an outage."""

    model: str  # the model asked for (JUDGE_MODEL); results name the one that answered

    @property
    def holding(self) -> bool:
        """True while the judge is down for everyone (calls wait for it to come back)."""
        ...

    async def judge(self, request: JudgeRequest) -> JudgeResult:
        """One evaluation: an answer or this trace's error."""
        ...

    async def close(self) -> None:
        """Release the judge's connections."""
        ...
