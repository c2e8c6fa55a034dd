"""OTel GenAI attributes and events read off one span: operation, messages, tools (pure).

The names are written here rather than imported: the only published constants,
``opentelemetry.semconv._incubating.attributes.gen_ai_attributes``, come with
``opentelemetry-semantic-conventions``, which the worker does not depend on at run time (only
the test-only SDK pulls it in), sit in a private, "incubating" module, and mark every GenAI
name deprecated (moved to the semantic-conventions-genai repository); the event names are not
published at all. ``tests/unit/telemetry`` checks every name below against those constants.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from consumer.telemetry.attributes import (
    content_text,
    indexed,
    json_text,
    json_value,
    parts_text,
    text,
)
from consumer.telemetry.mapped_trace import Message, ToolCall
from consumer.telemetry.openinference import tool_name
from consumer.telemetry.spans import Attributes, Span, SpanEvent
from schemas.trace import Document

GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
GEN_AI_PROMPT: Final = "gen_ai.prompt"  # older: gen_ai.prompt.N.{role,content}, or JSON
GEN_AI_COMPLETION: Final = "gen_ai.completion"  # older: gen_ai.completion.N.*, or JSON
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
GEN_AI_TOOL_DEFINITIONS: Final = "gen_ai.tool.definitions"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
# An array of {"id", "score"} (its JSON schema allows more properties, and names no text):
# only an item with "content" (or "text") is a document the judge can read.
GEN_AI_RETRIEVAL_DOCUMENTS: Final = "gen_ai.retrieval.documents"

CHAT: Final = "chat"
TEXT_COMPLETION: Final = "text_completion"
GENERATE_CONTENT: Final = "generate_content"
RETRIEVAL: Final = "retrieval"
EXECUTE_TOOL: Final = "execute_tool"
INVOKE_AGENT: Final = "invoke_agent"
LLM_OPERATIONS = frozenset({CHAT, TEXT_COMPLETION, GENERATE_CONTENT})

# Per-message events (semantic conventions 1.28-1.36), as span events or as log records joined
# to their span (``log_events.py``); their body is in ``gen_ai.event.content`` (JSON text, or
# a log record's key-value list body as a dict) or flat in the attributes.
# ``opentelemetry-instrumentation-openai-v2`` writes {"content"} for system / user messages
# (content a string or OpenAI's list of parts), {"tool_calls": [...]} for an assistant message
# that called tools, {"content", "id"} for a tool message, and for each choice {"index",
# "finish_reason", "message": {"role", "content", "tool_calls"}}.
MESSAGE_EVENTS: Final = {
    "gen_ai.system.message": "system",
    # Not a convention's name: openai-v2 names the event by the message's role, and OpenAI's
    # reasoning models take their instructions as "developer".
    "gen_ai.developer.message": "developer",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
CHOICE_EVENT: Final = "gen_ai.choice"
EVENT_CONTENT: Final = "gen_ai.event.content"
# semantic conventions 1.37+: one record per call whose attributes are the span's content
# attributes, structured (``gen_ai.input.messages`` an array of {"role", "parts"}...).
OPERATION_DETAILS_EVENT: Final = "gen_ai.client.inference.operation.details"


def operation(span: Span) -> str | None:
    """The span's ``gen_ai.operation.name``, or None."""
    value = span.attributes.get(GEN_AI_OPERATION_NAME)
    return value if isinstance(value, str) else None


def input_messages(span: Span) -> list[Message]:
    """The call's input: system instructions and ``gen_ai.input.messages``; else the older
    ``gen_ai.prompt.*`` attributes; else the per-message events."""
    attributes = span.attributes
    system = json_value(attributes.get(GEN_AI_SYSTEM_INSTRUCTIONS))
    instructions = parts_text(system) if isinstance(system, list) else None
    found = [Message("system", instructions)] if instructions else []
    found += (_json_messages(attributes.get(GEN_AI_INPUT_MESSAGES), tool_results=True)
              or _older(attributes, GEN_AI_PROMPT)
              or [m for event in span.events if (m := _event_message(event)) is not None])
    return found


def output_messages(span: Span) -> list[Message]:
    """The model's reply: ``gen_ai.output.messages``; else ``gen_ai.completion.*``; else the
    ``gen_ai.choice`` events."""
    attributes = span.attributes
    return (_json_messages(attributes.get(GEN_AI_OUTPUT_MESSAGES))
            or _older(attributes, GEN_AI_COMPLETION)
            or [m for event in span.events if (m := _choice_message(event)) is not None])


def records_output(span: Span) -> bool:
    """True when the span recorded the model's reply somewhere, even blank: the output
    messages, ``gen_ai.completion``, or a ``gen_ai.choice`` event with content. A choice
    without content (content capture off) is no reply recorded."""
    attributes = span.attributes
    if GEN_AI_OUTPUT_MESSAGES in attributes or GEN_AI_COMPLETION in attributes:
        return True
    if any(key.startswith(GEN_AI_COMPLETION + ".") for key in attributes):
        return True
    return any(_choice_has_content(event) for event in span.events)


def output_tool_calls(span: Span) -> list[ToolCall]:
    """The tool calls the model asked for: output message parts, ``gen_ai.completion.N.
    tool_calls.M.*``, ``gen_ai.choice`` events."""
    calls = []
    for message in _json_list(span.attributes.get(GEN_AI_OUTPUT_MESSAGES)):
        for part in _json_list(message.get("parts")):
            if part.get("type") == "tool_call" and (name := text(part.get("name"))):
                calls.append(ToolCall(name, json_text(part.get("arguments")),
                                      call_id=text(part.get("id")), span_id=span.span_id))
    for item in indexed(span.attributes, GEN_AI_COMPLETION):
        for call in indexed(item, "tool_calls"):
            if name := text(call.get("name")):
                calls.append(ToolCall(name, json_text(call.get("arguments")),
                                      call_id=text(call.get("id")), span_id=span.span_id))
    for event in span.events:
        if event.name == CHOICE_EVENT:
            message = json_value(_event_body(event).get("message"))
            if isinstance(message, dict):
                calls += _openai_tool_calls(message.get("tool_calls"), span.span_id)
    return calls


def tool_span_call(span: Span) -> ToolCall:
    """An ``execute_tool`` span as the call it ran."""
    attributes = span.attributes
    name = text(attributes.get(GEN_AI_TOOL_NAME)) or span.name.removeprefix(EXECUTE_TOOL).strip()
    return ToolCall(
        name=name or span.name,
        arguments=json_text(attributes.get(GEN_AI_TOOL_CALL_ARGUMENTS)),
        result=json_text(attributes.get(GEN_AI_TOOL_CALL_RESULT)),
        call_id=text(attributes.get(GEN_AI_TOOL_CALL_ID)),
        span_id=span.span_id,
        error=span.error,
    )


def tool_definitions(span: Span) -> list[str]:
    """The names in ``gen_ai.tool.definitions``."""
    definitions = _json_list(span.attributes.get(GEN_AI_TOOL_DEFINITIONS))
    return [name for definition in definitions if (name := tool_name(definition)) is not None]


def retrieval_documents(span: Span) -> list[Document]:
    """The items of ``gen_ai.retrieval.documents`` (JSON, or an OTLP array) that carry text:
    ``content`` (else ``text``), with their ``id``; ``score`` and ``metadata`` as metadata."""
    found = []
    for item in _json_list(span.attributes.get(GEN_AI_RETRIEVAL_DOCUMENTS)):
        content = content_text(item.get("content")) or text(item.get("text"))
        if content is None:
            continue
        metadata = json_value(item.get("metadata"))
        metadata = dict(metadata) if isinstance(metadata, dict) else {}
        if isinstance(score := item.get("score"), int | float) and not isinstance(score, bool):
            metadata["score"] = score
        found.append(Document(content=content, id=text(item.get("id")),
                              metadata=metadata or None))
    return found


def _json_list(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON (or structured) array attribute; anything else is empty."""
    data = json_value(value)
    return [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []


def _json_messages(value: Any, *, tool_results: bool = False) -> list[Message]:
    """``[{"role", "parts": [...]}]`` (1.37+), or ``[{"role", "content"}]`` (the older JSON).
    ``tool_results`` (a call's input): a ``tool_call_response`` part is a message of its own,
    role ``tool``, whatever role its message has (Pydantic AI sends a tool's result back in a
    ``user`` message)."""
    found = []
    for message in _json_list(value):
        body = content_text(message.get("parts", message.get("content")))
        role = message.get("role")
        if body is not None:
            found.append(Message(role.lower() if isinstance(role, str) else "", body))
        if tool_results:
            found += _tool_responses(message.get("parts"))
    return found


def _tool_responses(parts: Any) -> list[Message]:
    """The tool results among a message's parts: ``response`` (the conventions' name) or
    ``result`` (Pydantic AI's), as text."""
    found = []
    for part in parts if isinstance(parts, list | tuple) else ():
        if isinstance(part, dict) and part.get("type") == "tool_call_response":
            result = json_text(part.get("response")) or json_text(part.get("result"))
            if result is not None:
                found.append(Message("tool", result))
    return found


def _older(attributes: Attributes, prefix: str) -> list[Message]:
    """``prefix.N.{role,content}``, or ``prefix`` itself holding a JSON message list."""
    found = [
        Message(role.lower() if isinstance(role := item.get("role"), str) else "", content)
        for item in indexed(attributes, prefix)
        if (content := text(item.get("content"))) is not None
    ]
    return found or _json_messages(attributes.get(prefix))


def _event_body(event: SpanEvent) -> dict[str, Any]:
    body = dict(event.attributes)
    content = json_value(event.attributes.get(EVENT_CONTENT))
    if isinstance(content, dict):
        body.update(content)
    return body


def _event_message(event: SpanEvent) -> Message | None:
    role = MESSAGE_EVENTS.get(event.name)
    if role is None:
        return None
    content = content_text(_event_body(event).get("content"))
    return Message(role, content) if content is not None else None


def _choice_message(event: SpanEvent) -> Message | None:
    if event.name != CHOICE_EVENT:
        return None
    body = _event_body(event)
    message = json_value(body.get("message"))
    content = message.get("content") if isinstance(message, dict) else None
    found = (content_text(content) or text(body.get("message.content"))
             or content_text(body.get("content")))
    return Message("assistant", found) if found is not None else None


def _choice_has_content(event: SpanEvent) -> bool:
    if event.name != CHOICE_EVENT:
        return False
    body = _event_body(event)
    message = json_value(body.get("message"))
    return ((isinstance(message, dict) and message.get("content") is not None)
            or body.get("message.content") is not None or body.get("content") is not None)


def _openai_tool_calls(value: Any, span_id: str) -> Iterable[ToolCall]:
    calls = json_value(value)  # a JSON list, or an OTLP array of key-value lists
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and (name := text(function.get("name"))):
            yield ToolCall(name, json_text(function.get("arguments")),
                           call_id=text(call.get("id")), span_id=span_id)
