"""One trace -> one verdict: build the request, ask the judge, apply the threshold."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from consumer.errors import JudgeUnavailable
from consumer.judge.prompt import Limits, build_request
from consumer.judge.result import Judge, JudgeResult
from consumer.redaction import known_secrets
from consumer.verdicts import Context, TraceOrigin, verdict_for
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
        self, judge: Judge, threshold: float, limits: Limits, secrets: Iterable[str] = ()
    ) -> None:
        self.judge = judge
        self.threshold = threshold
        self.limits = limits
        self.secrets = known_secrets(secrets)  # never published: redacted from verdicts

    async def evaluate(
        self, trace: TraceEvent, source: Source | None = None, origin: TraceOrigin | None = None
    ) -> Evaluation:
        """Judge one trace, holding (not failing) while the judge is down for everyone."""
        request = build_request(trace, self.limits)
        while True:
            try:
                result = await self.judge.judge(request)
                break
            except JudgeUnavailable:
                continue  # the next call waits at the judge's circuit breaker
        # origin: set for a trace assembled from spans, whose verdict then carries it.
        ctx = Context(self.judge.model, self.threshold, request.truncation, source,
                      self.secrets, origin)
        return Evaluation(verdict_for(trace, result, ctx), result)
