"""A verdict as a ``gen_ai.evaluation.result`` event: its attributes and its trace context.

The GenAI semantic conventions' attributes carry the rule (``gen_ai.evaluation.name``), the
score, the label (``pass`` / ``fail`` / ``error``) and the reason (``explanation``; for an
``error`` verdict, its error's type and message, with ``error.type``). What the conventions
have no name for is under ``groundedness.*``: the verdict's id and trace id (as the verdict
has them, an OTel id or not), the prompt version, the judge model, the unsupported claims.

The event sits on the judged answer's span when the verdict names both OTel ids: a 32-hex
trace id and a 16-hex span id (span input always; a ``trace_json`` event that gives a
``span_id``). Otherwise it has no trace context, and only ``groundedness.trace_id`` ties it
to its trace. Every text here is the verdict's, already redacted of known secrets and bounded
(``consumer/rules/verdicts.py``).
"""

from __future__ import annotations

from datetime import datetime

from opentelemetry.context import Context
from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
    GEN_AI_EVALUATION_EXPLANATION,
    GEN_AI_EVALUATION_NAME,
    GEN_AI_EVALUATION_SCORE_LABEL,
    GEN_AI_EVALUATION_SCORE_VALUE,
)
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    TraceFlags,
    set_span_in_context,
)
from opentelemetry.util.types import AttributeValue

from schemas.trace import is_otel_span_id, is_otel_trace_id
from schemas.verdict import VerdictEvent

# The conventions' event name (no published constant for it in the installed semconv).
EVENT_NAME = "gen_ai.evaluation.result"
VERDICT_ID = "groundedness.verdict_id"
TRACE_ID = "groundedness.trace_id"
PROMPT_VERSION = "groundedness.prompt_version"
JUDGE_MODEL = "groundedness.judge_model"
UNSUPPORTED_CLAIMS = "groundedness.unsupported_claims"



def event_attributes(verdict: VerdictEvent) -> dict[str, AttributeValue]:
    """The event's attributes; a value the verdict does not have is left out, not empty."""
    attributes: dict[str, AttributeValue] = {
        GEN_AI_EVALUATION_NAME: verdict.rule,
        GEN_AI_EVALUATION_SCORE_LABEL: verdict.verdict,
        VERDICT_ID: verdict.verdict_id,
        TRACE_ID: verdict.trace_id,
        PROMPT_VERSION: verdict.prompt_version,
    }
    if verdict.score is not None:
        attributes[GEN_AI_EVALUATION_SCORE_VALUE] = verdict.score
    explanation = verdict.reason
    if verdict.error is not None:
        attributes[ERROR_TYPE] = verdict.error.type
        explanation = f"{verdict.error.type}: {verdict.error.message}"
    if explanation:
        attributes[GEN_AI_EVALUATION_EXPLANATION] = explanation
    if verdict.judge_model is not None:
        attributes[JUDGE_MODEL] = verdict.judge_model
    if verdict.unsupported_claims:
        attributes[UNSUPPORTED_CLAIMS] = list(verdict.unsupported_claims)
    return attributes


def event_time_ns(verdict: VerdictEvent) -> int | None:
    """When the verdict was made (``evaluated_at``), in ns since the epoch: the event's time,
    so a backend orders it by the judging, not by when the collector received it."""
    try:
        return int(datetime.fromisoformat(verdict.evaluated_at).timestamp() * 1_000_000) * 1000
    except ValueError:  # no time rather than a wrong one: the SDK then sets none
        return None


def otel_ids(verdict: VerdictEvent) -> tuple[int, int] | None:
    """The judged trace's and answer span's OTel ids, when the verdict names both (all-zero
    ids are invalid in OTel, so they name nothing)."""
    trace_id, span_id = verdict.trace_id, verdict.span_id or ""
    if not (is_otel_trace_id(trace_id) and is_otel_span_id(span_id)):
        return None
    return int(trace_id, 16), int(span_id, 16)


def event_context(verdict: VerdictEvent) -> Context:
    """The context the event is emitted in: the answer's span when ``otel_ids`` has it, else
    an empty one (never the worker's own current context)."""
    ids = otel_ids(verdict)
    if ids is None:
        return Context()
    span = SpanContext(trace_id=ids[0], span_id=ids[1], is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return set_span_in_context(NonRecordingSpan(span), Context())
