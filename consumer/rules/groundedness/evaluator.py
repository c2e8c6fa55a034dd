"""One trace -> one verdict: build the request, ask the judge (or reuse its answer to an
identical request, ``JUDGE_CACHE_SIZE``), apply the threshold, price the tokens."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from consumer.cost.judge_cache import JudgeCache
from consumer.cost.pricing import Prices
from consumer.errors import JudgeUnavailable
from consumer.judge.prompt import JudgeRequest, Limits, build_request
from consumer.judge.result import Judge, JudgeResult
from consumer.redaction import known_secrets
from consumer.rules.verdicts import Context, verdict_for
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
    ) -> None:
        self.judge = judge
        self.threshold = threshold
        self.limits = limits
        self.secrets = known_secrets(secrets)  # never published: redacted from verdicts
        self.cache = cache if cache is not None else JudgeCache(0)  # an empty one is falsy
        self.prices = prices

    async def evaluate(
        self, trace: TraceEvent, source: Source | None = None, origin: TraceOrigin | None = None
    ) -> Evaluation:
        """Judge one trace, holding (not failing) while the judge is down for everyone."""
        request = build_request(trace, self.limits)
        if self.cache.size:
            key = self.cache.key_for(self.judge.model, request)
            result, cached = await self.cache.answer(key, lambda: self._judged(request))
        else:  # no digest of the messages to make
            result, cached = await self._judged(request), False
        # origin: set for a trace assembled from spans, whose verdict then carries it.
        ctx = Context(self.judge.model, self.threshold, request.truncation, source,
                      self.secrets, origin, cached=cached, prices=self.prices)
        return Evaluation(verdict_for(trace, result, ctx), result)

    async def _judged(self, request: JudgeRequest) -> JudgeResult:
        while True:
            try:
                return await self.judge.judge(request)
            except JudgeUnavailable:
                continue  # the next call waits at the judge's circuit breaker
