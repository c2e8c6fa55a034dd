"""What published verdicts add up to (``replay``'s and ``check``'s summaries), counted as
each is acknowledged (``pipeline.delivery.sink.RecordingSink``).

Every verdict counts in the totals and in its rule's; scores, latencies, tokens, cache hits and
cost are the judge's (``groundedness``): a deterministic verdict's score is its pass or fail,
its latency 0, and counted there they would only blur the judge's figures. Tokens and cost are
the verdicts' own (``usage``, ``cost_usd``: a cached answer's are 0, an error's count too), so
the summary says what the worker's metrics say for the same verdicts."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from consumer.cost.pricing import CostTally
from schemas.verdict import RULE, VerdictEvent


@dataclass(slots=True)
class Tally:
    """What the published verdicts add up to."""

    verdicts: Counter[str] = field(default_factory=Counter)
    by_rule: Counter[tuple[str, str]] = field(default_factory=Counter)  # (rule, verdict)
    scores: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[int] = field(default_factory=list)
    cost: CostTally = field(default_factory=CostTally)  # the judge's tokens and USD
    cache_hits: int = 0  # judge verdicts from a reused answer (``cached``)

    def add(self, verdict: VerdictEvent) -> None:
        """Count one verdict."""
        self.verdicts[verdict.verdict] += 1
        self.by_rule[verdict.rule, verdict.verdict] += 1
        if verdict.rule != RULE:
            return
        if verdict.score is not None:
            self.scores[f"{verdict.score:.2f}"] += 1
        if not verdict.cached:  # a reused answer took no judge time (nor in the metric)
            self.latencies_ms.append(verdict.latency_ms)
        self.cost.add(verdict.usage, verdict.cost_usd)
        self.cache_hits += verdict.cached

    @property
    def tokens(self) -> dict[str, int]:
        """The judge's tokens: ``prompt``, ``completion`` and ``total``."""
        cost = self.cost
        return {"prompt": cost.prompt_tokens, "completion": cost.completion_tokens,
                "total": cost.total_tokens}

