"""What a rule is: a name, a version, whether it applies to a trace, and an evaluation.

Two kinds, told apart by their evaluation, because what can happen during it differs:

- ``DeterministicRule.check(trace, origin) -> Outcome``: plain and pure, microseconds, no I/O.
  It cannot time out, fail for one trace while others pass, or wait out an outage, so it
  always gives pass (score 1) or fail (score 0) and a reason naming what was or was not found.
- ``JudgedRule.evaluate(trace, origin, source) -> Evaluation``: async, a model call behind the
  breaker, the slots and the rate limiter; it can give ``error`` and can hold while the judge
  is down for everyone. ``consumer.rules.groundedness.evaluator.Evaluator.evaluate`` does that work;
  groundedness is this kind's one rule by a small adapter around it (``groundedness/rule.py``)
  that adds a name, a version and ``applies`` (an answer, the judge's only condition).

One async method for both would make every caller of a deterministic rule (the pipeline, a
test, a benchmark, ``check``) run an event loop for pure string work, and would hide from the
type what the pipeline must know: a deterministic rule needs no judge, no key, no slot, and
never holds. So the pipeline asks ``isinstance(rule, DeterministicRule)`` (both protocols are
runtime-checkable) and calls ``check`` inline, else awaits ``evaluate``.

Both take the trace event and, for a trace assembled from spans, its ``TraceOrigin`` (None for
a ``trace_json`` event): the origin says where the documents came from, and when no retriever
recorded any (``context_source`` ``llm_input``) the event's documents are the model's prompt,
not retrieved documents, which a rule such as a citation check must not read as sources.

A verdict names its rule as ``name@version`` (``rule_id``): the version changes whenever what
passes and fails changes, so verdicts of two versions are never mixed up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from consumer.rules.groundedness.evaluator import Evaluation
from consumer.telemetry.origin import TraceOrigin
from schemas.trace import TraceEvent
from schemas.verdict import Source


@dataclass(frozen=True, slots=True)
class Outcome:
    """A deterministic rule's finding on one trace: pass or fail, and why."""

    passed: bool
    reason: str

    @property
    def score(self) -> float:
        """1.0 for a pass, 0.0 for a fail."""
        return 1.0 if self.passed else 0.0

    @property
    def verdict(self) -> str:
        """``pass`` or ``fail``, as the verdict writes it."""
        return "pass" if self.passed else "fail"


class Rule(Protocol):
    """What every rule has: its name, its version, and the traces it applies to."""

    @property
    def name(self) -> str:
        """The rule's name, as ``RULES`` lists it (``missing_citation``)."""
        ...

    @property
    def version(self) -> str:
        """What passes and fails under this name (``v1``)."""
        ...

    def applies(self, trace: TraceEvent, origin: TraceOrigin | None) -> bool:
        """True when the rule has something to say of this trace (one verdict, else none)."""
        ...


@runtime_checkable
class DeterministicRule(Rule, Protocol):
    """A rule decided from the trace alone, without a model."""

    def check(self, trace: TraceEvent, origin: TraceOrigin | None) -> Outcome:
        """Pass or fail, for a trace the rule applies to."""
        ...


@runtime_checkable
class JudgedRule(Rule, Protocol):
    """A rule decided by a model: may error, may hold while the model is down for everyone."""

    @property
    def holding(self) -> bool:
        """True while the model is down for everyone (the pipeline stops fetching)."""
        ...

    async def evaluate(self, trace: TraceEvent, origin: TraceOrigin | None,
                       source: Source | None) -> Evaluation:
        """The verdict, for a trace the rule applies to."""
        ...

    async def close(self) -> None:
        """Release the model's client."""
        ...


def rule_id(rule: Rule) -> str:
    """``name@version``: what a verdict calls its rule."""
    return f"{rule.name}@{rule.version}"
