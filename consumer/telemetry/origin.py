"""Where a trace assembled from spans came from: the verdict's span fields (pure)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TraceOrigin:
    """Where a trace assembled from spans came from, and how its assembly closed."""

    span_id: str | None  # the answer's span, 16 hex
    project_id: str | None
    session_id: str | None
    context_source: str  # "retrieval" | "llm_input"
    spans: int  # GenAI spans kept
    root_seen: bool
    closed_by: str  # "quiet" | "max_wait" | "capacity"
    capped: int = 0  # GenAI spans not kept: over the trace's bounds
    # The resource's service and deployment environment: what TRACE_FILTER sees of a trace
    # from spans (not on the verdict).
    service: str | None = None
    environment: str | None = None
