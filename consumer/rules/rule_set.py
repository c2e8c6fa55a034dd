"""The rules ``RULES`` names, run on one trace: one verdict per rule that applies.

``groundedness`` is the judge (``groundedness/rule.py``, a ``JudgedRule``); the others are
deterministic rules from the registry. Every command that judges (``run``, ``replay``,
``check``, ``eval``) takes one of these, so what a trace gets is decided in one place: no
rule applies to a trace without an answer, ``groundedness`` to every other, and each
deterministic rule where it says so.

What is left out, to save the judge's cost (DESIGN.md, "Cost controls"), is chosen per rule
(``cost/rule_selection.py``): a rule's filter (``<RULE>_FILTER``, else ``TRACE_FILTER``)
chooses the traces it looks at (``filtered``), and its sample rate, by a hash of the trace id
salted by the rule, those it gives a verdict (``sampled_out``). A rule that does not apply to
a trace leaves nothing out. A trace without an answer gets no verdict from any rule
(``empty_output``; from spans whose LLM calls recorded no answer at all,
``no_answer_found``). Once the fleet's judge spend today reaches ``JUDGE_BUDGET_USD_PER_DAY``
(``cost/daily_budget.py``) the judge is not called: ``budget``, while the deterministic rules
go on.

A deterministic rule that raises on one trace (a bug) gives that trace an ``error`` verdict
of type ``internal_error`` for that rule alone: the trace's other verdicts are still due, and
the rule's next trace is checked as usual.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, cast, get_args

import structlog

from consumer.cost.daily_budget import OverBudget
from consumer.cost.rule_selection import EVERY_TRACE, Selection
from consumer.judge.result import TraceFailed
from consumer.redaction import known_secrets
from consumer.rules.base import DeterministicRule, JudgedRule, rule_id
from consumer.rules.groundedness.evaluator import Evaluation, Evaluator
from consumer.rules.groundedness.rule import Groundedness
from consumer.rules.verdicts import Context, checked, errored
from consumer.telemetry.origin import TraceOrigin
from schemas.trace import TraceEvent
from schemas.verdict import RuleName, Source, Truncation

log = structlog.get_logger(__name__)

INTERNAL_ERROR = "internal_error"  # the error verdict's type for a bug met on a trace's way


# Why a rule gave a trace no verdict: the reason of groundedness_skipped_total{rule}.
# no_answer_found: a trace from spans whose LLM calls recorded no answer anywhere (set by the
# span path, ``pipeline/traces.py``; an empty one is empty_output).
# budget: JUDGE_BUDGET_USD_PER_DAY was spent when the judge was to be called.
Skip = Literal["empty_output", "no_answer_found", "filtered", "sampled_out", "budget"]
SKIPS: tuple[Skip, ...] = get_args(Skip)
# The reasons that are the trace's, not a rule's choice: every rule skips it for them.
TRACE_WIDE: frozenset[Skip] = frozenset({"empty_output", "no_answer_found"})


@dataclass(frozen=True, slots=True)
class RuleResults:
    """One trace's verdicts, and why each rule that gave none left it out."""

    evaluations: list[Evaluation]
    skipped: Mapping[str, Skip] = field(default_factory=dict)  # rule -> reason
    project: str | None = None  # the trace's project, for the metrics' ``project`` label

    def left_out(self) -> Counter[str]:
        """What the outcomes count of this trace beside its verdicts: ``skipped`` once for a
        trace without an answer; each rule's ``filtered`` or ``sampled_out``;
        ``not_applicable`` when no rule applies to its answer."""
        reasons = set(self.skipped.values())
        if reasons & TRACE_WIDE:
            return Counter(skipped=1)
        if not self.skipped and not self.evaluations:
            return Counter(not_applicable=1)
        return Counter(self.skipped.values())


class RuleSet:
    """The configured rules, in ``RULES`` order, and what selects the traces they judge."""

    def __init__(
        self, rules: Sequence[JudgedRule | DeterministicRule], secrets: Iterable[str] = (), *,
        selections: Mapping[str, Selection] | None = None,
    ) -> None:
        if not rules:
            raise ValueError("a rule set needs at least one rule")
        self._rules = tuple(rules)
        # Told apart once: a runtime protocol check costs microseconds, on every trace.
        self._checks = frozenset(rule.name for rule in rules
                                 if isinstance(rule, DeterministicRule))
        self._judges = tuple(cast(JudgedRule, rule) for rule in rules
                             if rule.name not in self._checks)
        self._secrets = known_secrets(secrets)
        given = selections or {}  # a rule not named: every trace it applies to
        self._selections = tuple(given.get(rule.name, EVERY_TRACE) for rule in self._rules)

    @classmethod
    def groundedness(cls, evaluator: Evaluator) -> RuleSet:
        """Groundedness alone (``RULES`` by default)."""
        return cls([Groundedness(evaluator)], evaluator.secrets)

    @property
    def names(self) -> tuple[str, ...]:
        """The rules' names, in order."""
        return tuple(rule.name for rule in self._rules)

    @property
    def holding(self) -> bool:
        """True while a judge is down for everyone (never without a judged rule)."""
        return any(rule.holding for rule in self._judges)

    async def evaluate(
        self, trace: TraceEvent, source: Source | None = None, origin: TraceOrigin | None = None
    ) -> RuleResults:
        """A verdict from every rule that applies to the trace and selects it, in ``RULES``
        order."""
        if not trace.has_output:
            return self.skip_all("empty_output")
        chosen, skipped = self._select(trace, origin)
        # The deterministic verdicts first (microseconds) while the judge may take seconds;
        # then the judged ones, each in its own task so that several judges overlap.
        found: dict[str, Evaluation] = {
            rule.name: self._check(cast(DeterministicRule, rule), trace, source, origin)
            for rule in chosen if rule.name in self._checks
        }
        judged = [cast(JudgedRule, rule) for rule in chosen if rule.name not in self._checks]
        if len(judged) == 1:  # the usual case: no task to make for one call
            answers = [await self._judge(judged[0], trace, source, origin)]
        else:
            answers = await asyncio.gather(
                *(self._judge(rule, trace, source, origin) for rule in judged))
        for rule, answer in zip(judged, answers, strict=True):
            if answer is None:
                skipped[rule.name] = "budget"
            else:
                found[rule.name] = answer
        return RuleResults([found[rule.name] for rule in self._rules if rule.name in found],
                           skipped, origin.project_id if origin is not None else trace.project_id)

    @staticmethod
    async def _judge(rule: JudgedRule, trace: TraceEvent, source: Source | None,
                     origin: TraceOrigin | None) -> Evaluation | None:
        """The judged rule's verdict; None when today's judge budget is spent."""
        try:
            return await rule.evaluate(trace, origin, source)
        except OverBudget:
            return None

    def skip_all(self, reason: Skip) -> RuleResults:
        """No verdict from any rule, for a reason that is the trace's (``TRACE_WIDE``)."""
        return RuleResults([], dict.fromkeys(self.names, reason))

    def _select(self, trace: TraceEvent, origin: TraceOrigin | None) -> tuple[
            list[JudgedRule | DeterministicRule], dict[str, Skip]]:
        """The rules that apply to the trace and select it, and why the others that apply
        do not. A filter several rules share (``TRACE_FILTER``) is evaluated once."""
        chosen: list[JudgedRule | DeterministicRule] = []
        skipped: dict[str, Skip] = {}
        kept: dict[int, bool] = {}  # id(filter) -> its answer for this trace
        for rule, selection in zip(self._rules, self._selections, strict=True):
            if not rule.applies(trace, origin):
                continue
            chosen_by = selection.trace_filter
            if chosen_by is not None:
                if id(chosen_by) not in kept:
                    kept[id(chosen_by)] = chosen_by.keeps_trace(trace, origin)
                if not kept[id(chosen_by)]:
                    skipped[rule.name] = "filtered"
                    continue
            if not selection.samples(trace.trace_id):
                skipped[rule.name] = "sampled_out"
                continue
            chosen.append(rule)
        return chosen, skipped

    def failed(self, trace_id: str, source: Source | None, exc: Exception) -> list[Evaluation]:
        """An ``internal_error`` verdict for every rule, on a trace a bug stopped before its
        rules could say which of them apply (only its id is known for sure)."""
        trace = TraceEvent(trace_id=trace_id)
        return [self._error(rule, trace, source, None, exc) for rule in self._rules]

    async def close(self) -> None:
        """Release every judge's client."""
        for rule in self._judges:
            await rule.close()

    def _check(self, rule: DeterministicRule, trace: TraceEvent, source: Source | None,
               origin: TraceOrigin | None) -> Evaluation:
        try:
            outcome = rule.check(trace, origin)
        except Exception as exc:  # a bug in one rule must not cost the trace its other verdicts
            log.exception("rule_failed", rule=rule.name, trace_id=trace.trace_id[:200])
            return self._error(rule, trace, source, origin, exc)
        # The rule reads the whole trace: nothing is cut, and every document was received.
        received = Truncation(documents_received=len(trace.retrieved_documents or []))
        ctx = replace(self._context(rule, source, origin), truncation=received)
        return Evaluation(checked(trace, outcome.passed, outcome.reason, ctx), None)

    def _error(self, rule: JudgedRule | DeterministicRule, trace: TraceEvent,
               source: Source | None, origin: TraceOrigin | None, exc: Exception) -> Evaluation:
        message = f"{type(exc).__name__}: {exc}".splitlines()[0]
        failed = TraceFailed(kind=INTERNAL_ERROR, message=message, usage=None, latency_ms=0,
                             attempts=0)
        return Evaluation(errored(trace, failed, self._context(rule, source, origin)), failed)

    def _context(self, rule: JudgedRule | DeterministicRule, source: Source | None,
                 origin: TraceOrigin | None) -> Context:
        if isinstance(rule, Groundedness):
            evaluator = rule.evaluator
            return Context(evaluator.judge.model, evaluator.threshold, Truncation(), source,
                           evaluator.secrets, origin)
        return Context(None, None, Truncation(), source, self._secrets, origin,
                       rule=_rule_name(rule.name), prompt_version=rule_id(rule))


def _rule_name(name: str) -> RuleName:
    """``name`` as the verdict's literal; a registered rule the schema does not know is a bug."""
    if name not in get_args(RuleName):
        raise ValueError(f"rule {name!r} is not among the verdict schema's rules")
    return cast(RuleName, name)
