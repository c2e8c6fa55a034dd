"""OpenInference attributes read off one span: kind, values, messages, documents, tools (pure).

Names come from ``openinference-semantic-conventions`` (Arize's published constants), so a
misspelt name fails at import rather than matching nothing.
"""

from __future__ import annotations

from typing import Any

from openinference.semconv.trace import (
    DocumentAttributes,
    MessageAttributes,
    MessageContentAttributes,
    OpenInferenceMimeTypeValues,
    PromptAttributes,
    SpanAttributes,
    ToolAttributes,
    ToolCallAttributes,
)

from consumer.telemetry.attributes import (
    ASSISTANT_ROLES,
    INPUT_KEYS,
    OUTPUT_KEYS,
    USER_ROLES,
    indexed,
    json_text,
    json_value,
    looks_like_json,
    text,
    value_text,
)
from consumer.telemetry.mapped_trace import Message, ToolCall
from consumer.telemetry.spans import Attributes, Span
from schemas.trace import Document

KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
_JSON = OpenInferenceMimeTypeValues.JSON.value


def kind(span: Span) -> str | None:
    """The span's OpenInference kind (``LLM``, ``RETRIEVER``, ...), upper case, or None."""
    value = span.attributes.get(KIND)
    return value.upper() if isinstance(value, str) else None


def input_text(span: Span) -> str | None:
    """The text of the span's ``input.value`` (JSON read for the question)."""
    return _value(span, SpanAttributes.INPUT_VALUE, SpanAttributes.INPUT_MIME_TYPE, INPUT_KEYS,
                  USER_ROLES)


def output_text(span: Span) -> str | None:
    """The text of the span's ``output.value`` (JSON read for the answer)."""
    return _value(span, SpanAttributes.OUTPUT_VALUE, SpanAttributes.OUTPUT_MIME_TYPE, OUTPUT_KEYS,
                  ASSISTANT_ROLES)


def _value(span: Span, key: str, mime_key: str, keys: tuple[str, ...],
           roles: frozenset[str]) -> str | None:
    value = span.attributes.get(key)
    mime = span.attributes.get(mime_key)
    # A producer that wrote no mime type but JSON is read as JSON (text/plain is the default).
    is_json = mime == _JSON or (mime is None and looks_like_json(value))
    return value_text(value, is_json=is_json, keys=keys, roles=roles)


def input_messages(span: Span) -> list[Message]:
    """``llm.input_messages.N.message.*`` as messages."""
    return _messages(span.attributes, SpanAttributes.LLM_INPUT_MESSAGES)


def records_output(span: Span) -> bool:
    """True when the span recorded an output, even blank: ``output.value`` or output
    messages."""
    head = SpanAttributes.LLM_OUTPUT_MESSAGES + "."
    return SpanAttributes.OUTPUT_VALUE in span.attributes or any(
        key.startswith(head) for key in span.attributes)


def output_messages(span: Span) -> list[Message]:
    """``llm.output_messages.N.message.*`` as messages."""
    return _messages(span.attributes, SpanAttributes.LLM_OUTPUT_MESSAGES)


def prompts(span: Span) -> list[Message]:
    """A completion call's prompts (``llm.prompts``: an array of strings, or flattened
    ``llm.prompts.N.prompt.text``) as user messages: LlamaIndex's ``llm.complete`` records
    its input so, with the retrieved context written into the prompt."""
    value = span.attributes.get(SpanAttributes.LLM_PROMPTS)
    items = list(value) if isinstance(value, tuple | list) else [
        item.get(PromptAttributes.PROMPT_TEXT)
        for item in indexed(span.attributes, SpanAttributes.LLM_PROMPTS)
    ]
    return [Message("user", found) for item in items if (found := text(item)) is not None]


def _messages(attributes: Attributes, prefix: str) -> list[Message]:
    messages = []
    for item in indexed(attributes, prefix):
        role = item.get(MessageAttributes.MESSAGE_ROLE)
        content = text(item.get(MessageAttributes.MESSAGE_CONTENT)) or _contents_text(item)
        if content is not None:
            messages.append(Message(role.lower() if isinstance(role, str) else "", content))
    return messages


def _contents_text(item: dict[str, Any]) -> str | None:
    """A multimodal message's text parts (``message.contents.N.message_content.*``)."""
    texts = [
        found for part in indexed(item, MessageAttributes.MESSAGE_CONTENTS)
        if part.get(MessageContentAttributes.MESSAGE_CONTENT_TYPE, "text") == "text"
        and (found := text(part.get(MessageContentAttributes.MESSAGE_CONTENT_TEXT))) is not None
    ]
    return "\n".join(texts) if texts else None


def output_tool_calls(span: Span) -> list[ToolCall]:
    """The tool calls the model asked for in its output messages."""
    calls = []
    for item in indexed(span.attributes, SpanAttributes.LLM_OUTPUT_MESSAGES):
        for call in indexed(item, MessageAttributes.MESSAGE_TOOL_CALLS):
            name = text(call.get(ToolCallAttributes.TOOL_CALL_FUNCTION_NAME))
            if name is not None:
                calls.append(ToolCall(
                    name=name,
                    arguments=json_text(call.get(ToolCallAttributes.TOOL_CALL_FUNCTION_ARGUMENTS_JSON)),
                    call_id=text(call.get(ToolCallAttributes.TOOL_CALL_ID)),
                    span_id=span.span_id,
                ))
        # The legacy single function call (OpenAI's function_call, before tool_calls).
        name = text(item.get(MessageAttributes.MESSAGE_FUNCTION_CALL_NAME))
        if name is not None:
            arguments = item.get(MessageAttributes.MESSAGE_FUNCTION_CALL_ARGUMENTS_JSON)
            calls.append(ToolCall(name=name, arguments=json_text(arguments), span_id=span.span_id))
    return calls


def tool_span_call(span: Span) -> ToolCall:
    """A TOOL span as the call it ran: ``tool.name``, its input (else ``tool.parameters``),
    its output."""
    attributes = span.attributes
    # input.value holds the call's arguments; tool.parameters is the tool's parameter schema,
    # read only when the instrumentation recorded no input.
    arguments = json_text(attributes.get(SpanAttributes.INPUT_VALUE)) or json_text(
        attributes.get(SpanAttributes.TOOL_PARAMETERS))
    return ToolCall(
        name=text(attributes.get(SpanAttributes.TOOL_NAME)) or span.name,
        arguments=arguments,
        result=json_text(attributes.get(SpanAttributes.OUTPUT_VALUE)),
        call_id=text(attributes.get(SpanAttributes.TOOL_ID)),
        span_id=span.span_id,
        error=span.error,
    )


def tool_definitions(span: Span) -> list[str]:
    """The names of the tools offered to the model (``llm.tools.N.tool.json_schema``)."""
    names = []
    for item in indexed(span.attributes, SpanAttributes.LLM_TOOLS):
        schema = json_value(item.get(ToolAttributes.TOOL_JSON_SCHEMA))
        name = tool_name(schema) or text(item.get(ToolAttributes.TOOL_NAME))
        if name is not None:
            names.append(name)
    return names


def tool_name(schema: Any) -> str | None:
    """A tool definition's name: OpenAI's ``{"function": {"name"}}`` or a flat ``{"name"}``."""
    if not isinstance(schema, dict):
        return None
    function = schema.get("function")
    if isinstance(function, dict) and (name := text(function.get("name"))) is not None:
        return name
    return text(schema.get("name"))


def documents(attributes: Attributes, prefix: str) -> list[Document]:
    """The documents with text of a flattened list (``retrieval.documents``,
    ``reranker.output_documents``)."""
    found = []
    for item in indexed(attributes, prefix):
        content = text(item.get(DocumentAttributes.DOCUMENT_CONTENT))
        if content is None:
            continue
        metadata = json_value(item.get(DocumentAttributes.DOCUMENT_METADATA))
        found.append(Document(
            content=content,
            id=text(item.get(DocumentAttributes.DOCUMENT_ID)),
            metadata=metadata if isinstance(metadata, dict) else None,
        ))
    return found
