"""A closed trace's GenAI log records joined to its spans, so that convention mapping reads
them as the spans' own (pure).

The OpenTelemetry project's GenAI instrumentations (``opentelemetry-instrumentation-openai-v2``
and the others on ``opentelemetry-util-genai``) write message content as log records in their
default modes, not on the span: per message (``gen_ai.user.message``, ``gen_ai.choice``...),
or one ``gen_ai.client.inference.operation.details`` record per call whose attributes are the
span's content attributes (``gen_ai.input.messages``, ``gen_ai.output.messages``,
``gen_ai.system_instructions``, ``gen_ai.tool.definitions``), structured rather than JSON.
Each record names the span it was written in, so the join is by span id:

- a record becomes an event of its span, after the span's own events, the records in time
  order (arrival order among equal times), which is where the per-message readers of
  ``genai.py`` look for ``gen_ai.*.message`` and ``gen_ai.choice`` events already;
- a details event's ``gen_ai.*`` attributes are set on its span where the span has no value
  for them (the span's own win; of two details events of one span, the earlier), so a call
  recorded ``event_only`` reads as one recorded ``span_only``;
- a record that names no span belongs to the trace's one LLM call when it has exactly one
  (nothing else can have written it); with several, or none, it is left out, as is a record
  naming a span the trace does not hold (a span let go over the trace's bounds, or one that
  never arrived): putting another call's messages on the wrong call would judge one answer
  against another's context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from consumer.telemetry.conventions import is_llm_span
from consumer.telemetry.genai import OPERATION_DETAILS_EVENT
from consumer.telemetry.spans import AttributeValue, LogEvent, Span, SpanEvent

GEN_AI_PREFIX = "gen_ai."


def join_logs(spans: Sequence[Span], logs: Sequence[LogEvent]) -> tuple[Span, ...]:
    """The trace's spans, each with its log records as events and its details event's
    ``gen_ai.*`` attributes where it had none (see the module docstring); spans in the
    order given, those with nothing to join unchanged."""
    by_span = _by_span(spans, logs)
    return tuple(_joined(span, by_span.get(span.span_id, [])) for span in spans)


def _by_span(spans: Sequence[Span], logs: Sequence[LogEvent]) -> dict[str, list[SpanEvent]]:
    ids = {span.span_id for span in spans}
    unnamed = [log.event for log in logs if log.span_id is None]
    found: dict[str, list[SpanEvent]] = {}
    for log in logs:
        if log.span_id is not None and log.span_id in ids:
            found.setdefault(log.span_id, []).append(log.event)
    if unnamed:
        llm_calls = [span for span in spans if is_llm_span(span)]
        if len(llm_calls) == 1:
            found.setdefault(llm_calls[0].span_id, []).extend(unnamed)
    return found


def _joined(span: Span, logged: list[SpanEvent]) -> Span:
    # sorted is stable: records of the same time keep their arrival order.
    events = (*span.events, *sorted(logged, key=lambda event: event.time_unix_nano))
    missing: dict[str, AttributeValue] = {}
    for event in events:
        if event.name == OPERATION_DETAILS_EVENT:
            for key, value in event.attributes.items():
                if (key.startswith(GEN_AI_PREFIX) and key not in span.attributes
                        and key not in missing):
                    missing[key] = value
    if not logged and not missing:
        return span
    attributes = {**span.attributes, **missing} if missing else span.attributes
    return replace(span, events=events, attributes=attributes)
