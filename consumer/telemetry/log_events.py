"""A trace's GenAI log records joined to their spans (pure). (First cut: events only.)"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from consumer.telemetry.spans import LogEvent, Span


def join_logs(spans: Sequence[Span], logs: Sequence[LogEvent]) -> tuple[Span, ...]:
    """Each span with its log records' events after its own."""
    if not logs:
        return tuple(spans)
    by_span: dict[str | None, list[LogEvent]] = {}
    for record in logs:
        by_span.setdefault(record.span_id, []).append(record)
    return tuple(
        replace(span, events=(*span.events, *(r.event for r in by_span[span.span_id])))
        if span.span_id in by_span else span
        for span in spans
    )
