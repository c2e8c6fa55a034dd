"""Decoded records and spans for the assembly tests: trace number ``n`` -> its ids."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

from consumer.telemetry.assembly import ClosedTrace
from consumer.telemetry.spans import DecodedRecord, Span
from tests.support.otel_spans import KIND


def tid(n: int) -> str:
    """The 32-hex trace id of trace number ``n``."""
    return f"{n + 1:032x}"


def genai(trace: int, n: int = 1, *, parent: str | None = "00000000000000ff") -> Span:
    """A kept GenAI span of trace ``trace`` (a child of a dropped HTTP root by default)."""
    return Span(tid(trace), f"{n:016x}", parent, "chat", n, n + 1, {KIND: "LLM"})


def record(*kept: Span, other: dict[int, int] | None = None, roots: Collection[int] = ()
           ) -> DecodedRecord:
    """What ``decode_otlp`` returns for these kept spans, ``other`` non-GenAI spans per trace
    and dropped roots (``roots``): the same counts it keeps."""
    per_trace = Counter(span.trace_id for span in kept)
    for trace, n in (other or {}).items():
        per_trace[tid(trace)] += n
    root_ids = {tid(trace) for trace in roots} | {span.trace_id for span in kept if span.is_root}
    return DecodedRecord(
        kept=list(kept), dropped=sum((other or {}).values()), roots_seen=root_ids,
        spans_per_trace=dict(per_trace),
    )


def one(closed: list[ClosedTrace]) -> ClosedTrace:
    """The one trace closed."""
    assert len(closed) == 1
    return closed[0]
