"""``groundedness@v1``: the judge's rule, the ``Evaluator`` seen as a ``JudgedRule``.

Its version is the judge prompt's (``PROMPT_VERSION``): what passes and fails changes when
the prompt does. It applies to every trace with an answer.
"""

from __future__ import annotations

from consumer.judge.prompt import PROMPT_VERSION
from consumer.rules.groundedness.evaluator import Evaluation, Evaluator
from consumer.telemetry.origin import TraceOrigin
from schemas.trace import TraceEvent
from schemas.verdict import RULE, Source


class Groundedness:
    """Asks the judge whether the answer is supported by the trace's documents."""

    name = RULE
    version = PROMPT_VERSION.rpartition("@")[2]

    def __init__(self, evaluator: Evaluator) -> None:
        self.evaluator = evaluator

    @property
    def holding(self) -> bool:
        """True while the judge is down for everyone."""
        return self.evaluator.judge.holding

    def applies(self, trace: TraceEvent, origin: TraceOrigin | None) -> bool:
        """An answer: the judge's only condition."""
        return trace.has_output

    async def evaluate(self, trace: TraceEvent, origin: TraceOrigin | None,
                       source: Source | None) -> Evaluation:
        """The judge's verdict (holding, not failing, while the judge is down)."""
        return await self.evaluator.evaluate(trace, source, origin)

    async def close(self) -> None:
        """Close the judge's client."""
        await self.evaluator.judge.close()
