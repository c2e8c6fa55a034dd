"""``Span`` objects for convention tests, attribute names from the published constants."""

from __future__ import annotations

import json
from typing import Any

from openinference.semconv.trace import (
    DocumentAttributes,
    MessageAttributes,
    OpenInferenceSpanKindValues,
    SpanAttributes,
    ToolCallAttributes,
)

from consumer.telemetry.mapped_trace import MappedTrace
from consumer.telemetry.spans import Span, SpanEvent

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
DROPPED_ROOT = "00000000000000ff"  # an HTTP server span the decoder dropped
KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
LLM = OpenInferenceSpanKindValues.LLM.value
CHAIN = OpenInferenceSpanKindValues.CHAIN.value
RETRIEVER = OpenInferenceSpanKindValues.RETRIEVER.value
RERANKER = OpenInferenceSpanKindValues.RERANKER.value
TOOL = OpenInferenceSpanKindValues.TOOL.value
AGENT = OpenInferenceSpanKindValues.AGENT.value
EMBEDDING = OpenInferenceSpanKindValues.EMBEDDING.value


def sid(n: int) -> str:
    """The 16-hex span id of span number ``n``."""
    return f"{n:016x}"


def span(n: int, parent: int | str | None, attributes: dict[str, Any], *, start: int, end: int,
         events: tuple[SpanEvent, ...] = (), resource: dict[str, Any] | None = None,
         name: str = "span") -> Span:
    """Span ``n`` under ``parent`` (a number, a foreign id, or None for the root)."""
    parent_id = sid(parent) if isinstance(parent, int) else parent
    return Span(TRACE_ID, sid(n), parent_id, name, start, end, attributes, events, resource or {})


def messages(prefix: str, *pairs: tuple[str, str]) -> dict[str, Any]:
    """``prefix.N.message.role`` / ``.content`` for each (role, content)."""
    out: dict[str, Any] = {}
    for i, (role, content) in enumerate(pairs):
        out[f"{prefix}.{i}.{MessageAttributes.MESSAGE_ROLE}"] = role
        out[f"{prefix}.{i}.{MessageAttributes.MESSAGE_CONTENT}"] = content
    return out


def documents(prefix: str, *contents: str) -> dict[str, Any]:
    """``prefix.N.document.{content,id,metadata}``, ids ``d0``, ``d1``, ..."""
    out: dict[str, Any] = {}
    for i, content in enumerate(contents):
        out[f"{prefix}.{i}.{DocumentAttributes.DOCUMENT_CONTENT}"] = content
        out[f"{prefix}.{i}.{DocumentAttributes.DOCUMENT_ID}"] = f"d{i}"
        out[f"{prefix}.{i}.{DocumentAttributes.DOCUMENT_METADATA}"] = json.dumps({"n": i})
    return out


def output_tool_call(message: int, call: int, name: str, arguments: str,
                     call_id: str | None = None) -> dict[str, Any]:
    """An OpenInference output message's tool call."""
    head = (f"{SpanAttributes.LLM_OUTPUT_MESSAGES}.{message}."
            f"{MessageAttributes.MESSAGE_TOOL_CALLS}.{call}.")
    out = {head + ToolCallAttributes.TOOL_CALL_FUNCTION_NAME: name,
           head + ToolCallAttributes.TOOL_CALL_FUNCTION_ARGUMENTS_JSON: arguments}
    if call_id is not None:
        out[head + ToolCallAttributes.TOOL_CALL_ID] = call_id
    return out


def view(mapped: MappedTrace | None) -> dict[str, Any] | None:
    """The mapped trace as plain values a table row can state."""
    if mapped is None:
        return None
    return {
        "answer": mapped.answer,
        "answer_span": mapped.answer_span_id,
        "input": mapped.input,
        "docs": tuple(d.content for d in mapped.documents),
        "source": mapped.context_source,
        "tools": tuple((c.name, c.arguments, c.result) for c in mapped.tool_calls),
        "available": mapped.tools_available,
        "agent": mapped.agent,
        "project": mapped.project_id,
        "session": mapped.session_id,
    }


def check(mapped: MappedTrace | None, expected: dict[str, Any] | None) -> None:
    """The fields a row names are as it says (None: no candidate)."""
    seen = view(mapped)
    if expected is None or seen is None:
        assert seen == expected
        return
    assert {key: seen[key] for key in expected} == expected
