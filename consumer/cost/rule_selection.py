"""Which traces one rule looks at: its filter and its sample rate (pure).

``<RULE>_FILTER`` and ``<RULE>_SAMPLE_RATE`` (DESIGN.md, "Cost controls") choose per rule;
unset, a rule takes ``TRACE_FILTER``, and the judge ``SAMPLE_RATE`` (``Settings.selection``).
A rule's sample is salted by its name, so that two rules at the same rate pick different
traces, while each picks the same ones on every replica and in every replay.
"""

from __future__ import annotations

from dataclasses import dataclass

from consumer.cost.sampling import sampled
from consumer.cost.trace_filter import TraceFilter


@dataclass(frozen=True, slots=True)
class Selection:
    """One rule's filter (None: every trace) and sample rate, and the salt of its sample."""

    rate: float = 1.0
    trace_filter: TraceFilter | None = None
    salt: str = ""

    def samples(self, trace_id: str) -> bool:
        """True when the trace is in the rule's sample."""
        return sampled(trace_id, self.rate, self.salt)


EVERY_TRACE = Selection()  # a rule nothing selects for: every trace it applies to
