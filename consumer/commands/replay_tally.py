"""What a replay's published verdicts add up to: counted as the broker acknowledges each.

Every verdict counts in the totals and in its rule's; scores, latencies and tokens are the
judge's (``groundedness``): a deterministic verdict's score is its pass or fail, its latency 0,
and counted there they would only blur the judge's figures."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from schemas.verdict import RULE, VerdictEvent

if TYPE_CHECKING:  # types only; keeps aiokafka out of `groundedness --help`
    from consumer.stream.sink import Record, VerdictSink


@dataclass(slots=True)
class Tally:
    """What the published verdicts add up to."""

    verdicts: Counter[str] = field(default_factory=Counter)
    by_rule: Counter[tuple[str, str]] = field(default_factory=Counter)  # (rule, verdict)
    scores: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[int] = field(default_factory=list)
    tokens: Counter[str] = field(default_factory=Counter)

    def add(self, verdict: VerdictEvent) -> None:
        """Count one verdict."""
        self.verdicts[verdict.verdict] += 1
        self.by_rule[verdict.rule, verdict.verdict] += 1
        if verdict.rule != RULE:
            return
        if verdict.score is not None:
            self.scores[f"{verdict.score:.2f}"] += 1
        self.latencies_ms.append(verdict.latency_ms)
        if verdict.usage is not None:
            self.tokens["prompt"] += verdict.usage.prompt_tokens
            self.tokens["completion"] += verdict.usage.completion_tokens
            self.tokens["total"] += verdict.usage.total_tokens


class RecordingSink:
    """A ``VerdictSink`` that counts each verdict once the inner sink has it acknowledged."""

    def __init__(self, sink: VerdictSink, tally: Tally) -> None:
        self._sink = sink
        self._tally = tally

    async def publish(self, verdict: VerdictEvent) -> None:
        """Publish, then count."""
        await self._sink.publish(verdict)
        self._tally.add(verdict)

    async def dead_letter(self, record: Record, reason: str) -> None:
        """Dead-letter (the pipeline counts these)."""
        await self._sink.dead_letter(record, reason)
