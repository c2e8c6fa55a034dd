"""A closed trace -> the trace event and origin the judge takes, or why it gets no verdict (pure).

One reading for every way spans reach the judge: the worker's span path and ``check`` on an
OTLP JSON file. The verdict's span fields (``span_id``, ``project_id``, ``session_id``,
``context_source``, ``assembly``) come from here, so they mean the same on both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from consumer.telemetry.assembly import ClosedTrace
from consumer.telemetry.attributes import text
from consumer.telemetry.conventions import SERVICE_NAME, map_trace
from consumer.telemetry.origin import TraceOrigin
from consumer.telemetry.spans import Span
from schemas.trace import TraceEvent

# OTel's resource attribute for the environment, and the name it had before semconv 1.27.
DEPLOYMENT_ENVIRONMENT = ("deployment.environment.name", "deployment.environment")
# no_candidate: no LLM call, and no answer with documents (indexing work, or no GenAI span):
# nothing to judge. empty_answer: a candidate whose answer was recorded but is empty (blank, or
# no text: a reply of tool calls only): skipped. no_answer_found: a candidate whose answer no
# span or log record recorded at all (content capture off, the logs topic not read, a
# convention not read): skipped, and ``unanswered.names_seen`` says what its LLM calls carried.
NoVerdict = Literal["no_candidate", "empty_answer", "no_answer_found"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A trace to judge, and what its verdict says of where it came from."""

    trace: TraceEvent
    origin: TraceOrigin


def candidate(closed: ClosedTrace) -> Candidate | NoVerdict:
    """Map the closed trace's spans; the trace to judge, or why there is none."""
    mapped = map_trace(closed.spans, let_go=closed.let_go)
    if mapped is None:
        return "no_candidate"
    if not mapped.has_answer:
        return "empty_answer" if mapped.answer_found else "no_answer_found"
    origin = TraceOrigin(
        span_id=mapped.answer_span_id,
        project_id=mapped.project_id,
        session_id=mapped.session_id,
        context_source=mapped.context_source,
        spans=len(closed.spans),
        root_seen=closed.root_seen,
        closed_by=closed.closed_by,
        capped=closed.capped,
        service=resource_text(closed.spans, SERVICE_NAME),
        environment=resource_text(closed.spans, *DEPLOYMENT_ENVIRONMENT),
    )
    return Candidate(mapped.to_trace_event(), origin)


def resource_text(spans: Iterable[Span], *keys: str) -> str | None:
    """The first of ``keys`` a kept span's resource names as text (one service writes one
    resource, but a trace may cross services: the first span's counts)."""
    for span in spans:
        for key in keys:
            if (found := text(span.resource.get(key))) is not None:
                return found
    return None
