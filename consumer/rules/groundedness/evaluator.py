"""One trace -> one verdict: build the request, ask the judge (or reuse its answer to an
identical request, ``JUDGE_CACHE_SIZE``), apply the threshold, price the tokens; with a daily
budget, count each call's cost against it (``OverBudget`` once it is spent)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from consumer.cost.daily_budget import DailyBudget
from consumer.cost.judge_cache import JudgeCache
from consumer.cost.pricing import Prices
from consumer.errors import JudgeUnavailable
from consumer.judge.prompt import JudgeRequest, Limits, build_request
from consumer.judge.result import Judge, JudgeResult
from consumer.redaction import known_secrets
from consumer.rules.verdicts import Context, verdict_for, verdict_id
from consumer.telemetry.origin import TraceOrigin
from schemas.trace import TraceEvent
from schemas.verdict import Source, VerdictEvent


@dataclass(frozen=True, slots=True)
class Evaluation:
    """A verdict and the judge result it came from (None: a rule without a model)."""

    verdict: VerdictEvent
    result: JudgeResult | None


class Evaluator:
    """Evaluates traces with one judge, threshold and set of limits."""

    def __init__(
        self, judge: Judge, threshold: float, limits: Limits, secrets: Iterable[str] = (), *,
        cache: JudgeCache | None = None, prices: Prices | None = None,
        budget: DailyBudget | None = None,
    ) -> None:
        self.judge = judge
        self.threshold = threshold
        self.limits = limits
        self.secrets = known_secrets(secrets)  # never published: redacted from verdicts
        self.cache = cache if cache is not None else JudgeCache(0)  # an empty one is falsy
        self.prices = prices
        self.budget = budget  # JUDGE_BUDGET_USD_PER_DAY: needs the prices (the settings say)

    async def evaluate(
        self, trace: TraceEvent, source: Source | None = None, origin: TraceOrigin | None = None
    ) -> Evaluation:
        """Judge one trace, holding (not failing) while the judge is down for everyone."""
        request = build_request(trace, self.limits)
        # Without a budget the id is not needed before the verdict: not computed twice.
        charged = verdict_id(trace.trace_id) if self.budget is not None else ""
        if self.cache.size:
            key = self.cache.key_for(self.judge.model, request)
            result, cached = await self.cache.answer(key, lambda: self._judged(request, charged))
        else:  # no digest of the messages to make
            result, cached = await self._judged(request, charged), False
        # origin: set for a trace assembled from spans, whose verdict then carries it.
        ctx = Context(self.judge.model, self.threshold, request.truncation, source,
                      self.secrets, origin, cached=cached, prices=self.prices)
        return Evaluation(verdict_for(trace, result, ctx), result)

    async def _judged(self, request: JudgeRequest, charged: str) -> JudgeResult:
        """The judge's answer (a cache hit never gets here); with a budget, counted against
        it from the call's start, or OverBudget instead of a call."""
        if self.budget is None:
            return await self._asked(request)
        async with self.budget.slot:
            self.budget.start(charged, self._estimate_usd(request))
            spent = 0.0  # cancelled (a stop): no answer, nothing known to be spent
            try:
                result = await self._asked(request)
                spent = (self.prices.cost_usd(result.usage) if self.prices else None) or 0.0
                return result
            finally:
                self.budget.answered(charged, spent)

    async def _asked(self, request: JudgeRequest) -> JudgeResult:
        while True:
            try:
                return await self.judge.judge(request)
            except JudgeUnavailable:
                continue  # the next call waits at the judge's circuit breaker

    def _estimate_usd(self, request: JudgeRequest) -> float:
        """About the most the call can cost (``JudgeRequest.estimated_usage``)."""
        usage = request.estimated_usage()
        return (self.prices.cost_usd(usage) if self.prices is not None else None) or 0.0
