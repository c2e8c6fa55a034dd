"""What a replay's ``--dry-run`` counts and estimates, and the stand-ins that let it go through
the replay's own rules and pipeline.

A dry run runs the very rules the replay would: ``RULES`` as ``wiring.make_rules`` builds them
for ``run``, so ``TRACE_FILTER``, ``SAMPLE_RATE`` and the judge's answer cache
(``JUDGE_CACHE_SIZE``) decide as the worker decides: the same traces are filtered out, sampled
out and judged. Only the judge differs: ``EstimatingJudge`` calls nobody and answers every
request with its estimated tokens as the usage (the prompt as the rate limiter counts it:
ASCII characters / 4, any other character 1; the whole answer allowance as completion). So a
trace with an answer is counted as the replay would take it:

- the deterministic rules' verdicts are the replay's (free and pure), counted per rule;
- ``groundedness`` counts the traces it would judge (``would_judge``), of which the cache would
  answer ``cache_hits`` (an identical request earlier in the window) at no cost, and the
  estimated tokens of the others;
- a trace left out is counted by its reason (empty output, ``filtered``, ``sampled_out``), and
  one no rule applies to as ``not_applicable``.

The estimate is priced (``DryRunPrices``) at ``JUDGE_PRICE_INPUT_PER_MILLION`` /
``JUDGE_PRICE_OUTPUT_PER_MILLION`` when they are set: the prompt at the input price, the answer
allowance at the output price. Without them, every estimated token is priced at the fallback,
``--price-per-million-tokens``. An answer's length is known only once the judge wrote it, so
the estimate is a range: the prompts alone (``prompt_cost_usd``, as if answers were free) up to
the prompts with every answer at its whole allowance (``estimate.cost_usd``). On the bundled
sample with the local judge (54-token answers, against a 400-token allowance) at 0.15 / 0.60
USD, the dry run said $0.0865-$0.210 and the replay cost $0.106.

A trace event topic's dry run classifies each record as ``pipeline/records.py`` would
(``DryRun.add``). A span topic's runs the very ``Pipeline`` and ``SpanPath`` the replay runs,
so the same records close the same traces at the same moments, early ones included; only a
closed trace's way differs: ``TraceCounter`` takes the place of ``pipeline/traces.py``'s,
classifying it as that would (no candidate, empty answer, no answer found, or through the
rules). The
pipeline's sink (``NullSink``) sends nothing: a record that would be dead-lettered is counted
by the pipeline as usual.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from consumer import wiring
from consumer.cost.pricing import CONFIGURED_PRICES, FALLBACK_PRICE, CostTally, Prices
from consumer.errors import DecodeError
from consumer.inputs.trace_json import decode_trace
from consumer.judge.prompt import JudgeRequest
from consumer.judge.result import Answered
from consumer.rules.rule_set import RuleResults, RuleSet
from consumer.settings import Settings
from consumer.telemetry.assembly import ClosedTrace
from consumer.telemetry.origin import TraceOrigin
from consumer.telemetry.trace_event import candidate
from schemas.judge import MAX_RAW_SCORE, JudgeAnswer
from schemas.trace import TraceEvent
from schemas.verdict import RULE, Usage

if TYPE_CHECKING:  # types only
    from consumer.judge.result import JudgeResult
    from consumer.kafka.partitions import Partition
    from consumer.pipeline.delivery.sink import Record
    from schemas.verdict import VerdictEvent

# What EstimatingJudge answers: never published, never counted as a pass or a fail.
_NOT_JUDGED = JudgeAnswer(score=MAX_RAW_SCORE, reason="dry run: not judged")


@dataclass(frozen=True, slots=True)
class DryRunPrices:
    """The prices a dry run's estimate is at, and where they come from (``CONFIGURED_PRICES``
    or ``FALLBACK_PRICE``)."""

    prices: Prices
    source: str

    @classmethod
    def of(cls, settings: Settings, fallback_per_million: float) -> DryRunPrices:
        """``JUDGE_PRICE_*`` when set, else the fallback for every token."""
        configured = wiring.prices(settings)
        if configured is not None:
            return cls(configured, CONFIGURED_PRICES)
        return cls(Prices(fallback_per_million, fallback_per_million), FALLBACK_PRICE)

    def summary(self) -> dict[str, Any]:
        """Its fields in the summary."""
        return {"input_per_million": self.prices.input_per_million,
                "output_per_million": self.prices.output_per_million, "from": self.source}


def dry_run_rules(settings: Settings) -> RuleSet:
    """``RULES`` as ``run`` builds them (filter, sampling, cache), with ``EstimatingJudge`` as
    the judge: no call, no key."""
    judge = EstimatingJudge(settings.judge_model) if settings.judging else None
    return wiring.make_rules(settings, judge)


class DryRun:
    """What a replay would do, read without judging or publishing: ``rules`` from
    ``dry_run_rules``, the estimate at ``prices``."""

    def __init__(self, rules: RuleSet, prices: DryRunPrices) -> None:
        self.would_judge = 0  # groundedness verdicts the replay would publish
        self.cache_hits = 0  # of those, answered by the cache: no call, no tokens
        # Left out, as the outcomes count it (RuleResults.left_out): skipped, filtered,
        # sampled_out, not_applicable (an answer no rule applies to).
        self.left_out: Counter[str] = Counter()
        self.dead_lettered = 0
        self.by_rule: Counter[tuple[str, str]] = Counter()  # deterministic (rule, verdict)
        self.estimate = CostTally()  # the judge calls' estimated tokens, priced
        self.prices = prices
        self._rules = rules

    @property
    def estimated_tokens(self) -> int:
        """The judge calls' estimated tokens, prompt and answer allowance."""
        return self.estimate.total_tokens

    @property
    def prompt_cost_usd(self) -> float:
        """The low end of the estimate: the prompts alone, at the input price."""
        prompts = Usage(prompt_tokens=self.estimate.prompt_tokens)
        return self.prices.prices.cost_usd(prompts) or 0.0

    async def add(self, record: Record) -> None:
        """Classify one trace event record as the pipeline would."""
        try:
            trace = decode_trace(record.value)
        except DecodeError:
            self.dead_lettered += 1
            return
        await self.count_trace(trace)

    async def count_trace(self, trace: TraceEvent, origin: TraceOrigin | None = None) -> None:
        """One trace through the rules: what they would publish, and what they leave out."""
        # No source: nothing is published, and the verdicts are only counted.
        self.count(await self._rules.evaluate(trace, None, origin))

    def count(self, results: RuleResults) -> None:
        """One trace's results, counted as the replay's summary counts them."""
        self.left_out.update(results.left_out())
        for evaluation in results.evaluations:
            verdict = evaluation.verdict
            if verdict.rule == RULE:  # an estimate: neither a pass nor a fail
                self.would_judge += 1
                self.cache_hits += verdict.cached
                self.estimate.add(verdict.usage, self.prices.prices.cost_usd(verdict.usage))
            else:
                self.by_rule[verdict.rule, verdict.verdict] += 1


class TraceCounter:
    """A span topic's dry run: each closed trace counted as ``TracePath`` would take it
    (``pipeline/spans.ClosedTraces``), through the rules, nothing judged."""

    def __init__(self, dry: DryRun) -> None:
        self.dry = dry
        self.no_candidate = 0

    async def handle(self, tp: Partition, closed: ClosedTrace, bound: Any) -> None:
        """Count the trace; never raises (a bug is logged: the live worker's error verdict)."""
        try:
            found = candidate(closed)
            if found == "no_candidate":
                self.no_candidate += 1
            elif found == "empty_answer" or found == "no_answer_found":
                self.dry.left_out["skipped"] += 1
            else:
                await self.dry.count_trace(found.trace, found.origin)
        except Exception:  # the replay would publish an error verdict for it
            bound.exception("trace_failed")


class EstimatingJudge:
    """The judge of a dry run: calls nobody, and answers each request with its estimated
    tokens as the usage (prompt; the whole answer allowance as completion)."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.holding = False

    async def judge(self, request: JudgeRequest) -> JudgeResult:
        """An answer that is no verdict, costing what the request is estimated to."""
        usage = request.estimated_usage()
        # attempts 0: no call was made (the worker's metrics skip such results too).
        return Answered(_NOT_JUDGED, usage, latency_ms=0, attempts=0)

    async def close(self) -> None:
        """Nothing to release."""


class NullSink:
    """The sink of a dry run's pipeline: sends nothing (the pipeline still counts)."""

    async def publish(self, verdict: VerdictEvent) -> None:
        """Send nothing."""

    async def dead_letter(self, record: Record, reason: str) -> None:
        """Send nothing."""
