"""The trace event an LLM application publishes on ``TRACES_TOPIC``.

Ids are read in the JSON types producers use for them: an integer ``trace_id`` (Datadog's
64-bit ids), ``project_id`` or document ``id`` is kept as its decimal string; a whole float
id (``12.0``) as the integer's, when within 2**53 (past it a float no longer holds every
integer, so its digits are not the producer's id). An epoch number ``timestamp`` becomes an
ISO 8601 UTC instant.

A value with no such reading in a field the worker only carries along (a boolean
``timestamp``, a list ``metadata``, an id of ``1e30``) is dropped by the decoder
(``consumer.inputs.trace_json``); in a field read to judge (a boolean or float ``trace_id``, a
number
``output``) it refuses the trace.

The rules beside groundedness read the tools (DESIGN.md, "Rules"): ``tools_available`` (names)
and ``tool_calls`` (``{"name", "arguments"?, "result"?}``) are the contract's; a call's
``error`` (it failed) and ``agent`` (an agent answered, so the model had tools even when none
is listed) are this worker's additions, for what spans say and the contract's fields cannot.
A tool definition (``{"type": "function", "function": {"name"}}``) in place of a name, and an
OpenAI tool call (``{"id", "type", "function": {"name", "arguments"}}``) in place of a call,
are read as their names: they are what a producer logging its requests has at hand. Every one
is optional and unset by default, so a trace without tools reads and dumps as before.

``span_id`` (this worker's addition too) names the answer's OTel span, for a producer whose
``trace_id`` is its OTel trace id: the verdict then carries it, and its evaluation event
(``VERDICT_EVENTS=otlp``) sits on that span. Anything but 16 hex characters reads as unset.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    WithJsonSchema,
    field_validator,
    model_validator,
)

SCHEMA_VERSION = 1
# Long enough for any real id (OTel 32 hex, UUIDs, composite ids); a longer one is a broken
# producer, and it would ride on every verdict (a 1 MB id makes a verdict Kafka refuses).
MAX_TRACE_ID_CHARS = 1024
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# An epoch number's unit, by magnitude: below 1e11 it is seconds (up to year 5138), then
# milliseconds (from March 1973), microseconds, nanoseconds (OTel's unit). A milliseconds
# value before March 1973 is read as seconds: no real trace is that old.
_EPOCH_UNITS = ((10**11, 1), (10**14, 10**3), (10**17, 10**6))
_NANOSECONDS = 10**9
# Every integer up to this is exactly a float (a JSON producer in JavaScript writes ids so).
_MAX_EXACT_FLOAT = 2**53
_SPAN_ID = re.compile(r"[0-9a-fA-F]{16}")
_OTEL_TRACE_ID = re.compile(r"[0-9a-fA-F]{32}")


def is_otel_trace_id(value: str) -> bool:
    """32 hex digits, not all zero (an all-zero id is invalid in OTel): a W3C/OTel trace id."""
    return bool(_OTEL_TRACE_ID.fullmatch(value)) and bool(value.strip("0"))


def is_otel_span_id(value: str) -> bool:
    """16 hex digits, not all zero: an OTel span id."""
    return bool(_SPAN_ID.fullmatch(value)) and bool(value.strip("0"))


def _integer_trace_id(value: Any) -> Any:
    """An integer trace id as its decimal string; anything else is left to the string check
    (a float is not: ids past 2**53 would have lost digits)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def _integer_id(value: Any) -> Any:
    """An integer id, or a float holding one exactly, as its decimal string; anything else
    is left to the string check."""
    if (isinstance(value, float) and value.is_integer()
            and abs(value) <= _MAX_EXACT_FLOAT):
        return str(int(value))
    return _integer_trace_id(value)


def _epoch_instant(value: Any) -> Any:
    """An epoch number (seconds, ms, us or ns, told apart by magnitude) as an ISO 8601 UTC
    instant; strings are kept as sent, anything else is left to the string check."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    magnitude = abs(value)
    per_second = next((unit for bound, unit in _EPOCH_UNITS if magnitude < bound), _NANOSECONDS)
    try:
        if isinstance(value, int):  # exact: no float rounding of a nanosecond count
            seconds, rest = divmod(value, per_second)
            instant = _EPOCH + timedelta(seconds=seconds,
                                         microseconds=rest * 1_000_000 // per_second)
        elif math.isfinite(value):
            instant = _EPOCH + timedelta(seconds=value / per_second)
        else:
            raise OverflowError
    except OverflowError:
        raise ValueError(f"epoch number out of range: {value!r}"[:80]) from None
    return instant.isoformat().replace("+00:00", "Z")


def _definition_name(value: Any) -> Any:
    """A tool definition (OpenAI's ``{"function": {"name"}}`` or a flat ``{"name"}``) as its
    name; anything else is left to the string check."""
    if isinstance(value, dict):
        function = value.get("function")
        named = function if isinstance(function, dict) and "name" in function else value
        return named.get("name", value)
    return value


def _otel_span_id(value: Any) -> Any:
    """An OTel span id (16 hex, not all zero) in lower case; anything else is no span id (it
    only places an event, so it never refuses the trace)."""
    if isinstance(value, str) and is_otel_span_id(value):
        return value.lower()
    return None


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("tool name is blank")
    return value


TraceId = Annotated[
    str,
    BeforeValidator(_integer_trace_id),
    WithJsonSchema({"anyOf": [
        {"type": "string", "minLength": 1, "maxLength": MAX_TRACE_ID_CHARS}, {"type": "integer"},
    ]}),
]
IntegerId = Annotated[
    str | None, BeforeValidator(_integer_id, json_schema_input_type=str | int | None)
]
SpanId = Annotated[
    str | None,
    BeforeValidator(_otel_span_id),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "null"}]}),
]
EpochOrText = Annotated[
    str | None, BeforeValidator(_epoch_instant, json_schema_input_type=str | float | None)
]


class Document(BaseModel):
    """One retrieved document; a plain JSON string is accepted in its place."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    content: str
    id: IntegerId = None
    metadata: dict[str, Any] | None = None


ToolName = Annotated[
    str, BeforeValidator(_definition_name), AfterValidator(_not_blank), Field(min_length=1)
]


class ToolCall(BaseModel):
    """One tool call of the trace: a tool the application ran, or the model asked for."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: ToolName
    arguments: JsonValue = None
    result: JsonValue = None
    error: JsonValue = Field(
        default=None, description="Why the call failed, when it did (a message or an object).")

    @model_validator(mode="before")
    @classmethod
    def _openai_shape(cls, value: Any) -> Any:
        # OpenAI's {"type": "function", "function": {"name", "arguments"}}: the call inside.
        if isinstance(value, dict) and "name" not in value and isinstance(
                function := value.get("function"), dict):
            return {**value, **function}
        return value

    @property
    def failed(self) -> bool:
        """True when the call carries an error."""
        return self.error not in (None, False, "", {}, [])


class TraceEvent(BaseModel):
    """One answer of an LLM application, with the documents retrieved for it."""

    model_config = ConfigDict(extra="ignore", frozen=True, title="TraceEvent")

    trace_id: TraceId = Field(
        min_length=1, max_length=MAX_TRACE_ID_CHARS,
        description=f"Non-empty id of the trace, at most {MAX_TRACE_ID_CHARS} characters "
        "(an integer is read as its decimal string).",
    )
    output: str | None = Field(default=None, description="The answer to judge.")
    input: str | None = Field(default=None, description="The user's request or task.")
    retrieved_documents: list[Document] | None = None
    expected_output: str | None = None
    project_id: IntegerId = None
    timestamp: EpochOrText = Field(
        default=None, description="An ISO 8601 instant, or epoch s / ms / us / ns (a number)."
    )
    metadata: dict[str, Any] | None = None
    schema_version: int | None = None
    tools_available: list[ToolName] | None = Field(
        default=None, description="The names of the tools the model was offered.")
    tool_calls: list[ToolCall] | None = Field(
        default=None, description="The tool calls made while answering, in order.")
    agent: StrictBool | None = Field(
        default=None, description="True when an agent answered: the model had tools, "
        "listed or not.")
    span_id: SpanId = Field(
        default=None, description="The answer's span, 16 hex characters, with an OTel "
        "trace_id (32 hex): the verdict's evaluation event (VERDICT_EVENTS) is placed on it. "
        "Any other value is ignored.")

    @field_validator("retrieved_documents", mode="before")
    @classmethod
    def _strings_are_documents(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"content": item} if isinstance(item, str) else item for item in value]
        return value

    @field_validator("trace_id")
    @classmethod
    def _trace_id_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("trace_id is blank")
        return value

    @property
    def has_output(self) -> bool:
        """False when the output is missing, null, empty or whitespace only."""
        return bool(self.output and self.output.strip())
