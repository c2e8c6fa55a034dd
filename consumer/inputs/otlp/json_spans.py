"""OTLP/JSON bytes -> the protobuf ``TracesData`` of its GenAI spans, and what was left out (pure).

OTLP/JSON is protobuf's JSON mapping with three changes (the OTLP specification, "JSON
Protobuf Encoding"): trace and span ids are hex strings, not base64; enums are integers;
keys are lowerCamelCase. ``json_format.ParseDict`` already takes either key spelling, enums as
integers and 64-bit integers as strings or numbers, so only the ids need rewriting before it.

``ParseDict`` is pure Python and slow, so spans are filtered on the JSON objects first (the
rules of ``keep``) and only the kept ones are parsed; the others are counted in ``Skipped``.

Each kept span (and each resource) is parsed on its own, so one bad span (an ``intValue`` that
is no integer, a ``stringValue`` that is a number, a lone surrogate) is left out alone and
counted as unreadable, with the reason: the other spans of the batch, often other traces, are
still read. A resource that does not parse keeps the attributes that do. Only a record that
is not JSON, or whose frame is not a ``TracesData`` (``resourceSpans``, ``scopeSpans`` and
``spans`` not lists of objects), raises ``DecodeError``.

Base64 ids (protobuf's canonical JSON, a common mistake of hand-rolled exporters) are accepted:
the lengths never collide (a trace id is 32 hex digits or 24 base64 characters, a span id 16
or 12), so reading one for the other is impossible. A span whose id is neither is dropped and
counted as unreadable, alone: the rest of the record is read.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ScopeSpans, TracesData

from consumer.errors import DecodeError
from consumer.inputs.otlp.span_filter import (
    SPAN_ID_BYTES,
    TRACE_ID_BYTES,
    is_root,
    json_has_genai_content,
    valid_ids,
)

# What ParseDict raises for a value it cannot take (and a lone surrogate, deep nesting). A lone
# surrogate where protobuf looks a name up (an enum, a message's field) makes its C code raise
# SystemError, the UnicodeEncodeError as its cause.
PARSE_ERRORS = (json_format.ParseError, RecursionError, SystemError, TypeError, ValueError)
_ID_KEYS = {  # both spellings, as ParseDict accepts both
    "traceId": TRACE_ID_BYTES,
    "trace_id": TRACE_ID_BYTES,
    "spanId": SPAN_ID_BYTES,
    "span_id": SPAN_ID_BYTES,
    "parentSpanId": SPAN_ID_BYTES,
    "parent_span_id": SPAN_ID_BYTES,
}


INVALID_IDS = "a span without a valid trace id and span id"


# Field names and positions in protobuf's ParseError text; the failure's kind by a fixed
# phrase of it. Nothing else of the text is kept (it may quote the value).
_FAILED_FIELD = re.compile(r"Failed to parse (\w+) field: ")
_AT_FIELD = re.compile(
    r" at ((?:Span|Resource|ResourceSpans|ScopeSpans|InstrumentationScope|KeyValue|AnyValue)"
    r"(?:\.\w+|\[\d+\])*)\.*$"
)
_FAILURE_KINDS = (
    ("surrogate", "lone surrogate"),
    ("int()", "not an integer"),
    ("parse integer", "not an integer"),
    ("expected string", "not a string"),
    ("true or false", "not a boolean"),
    ("repeated field", "not a list"),
)


@dataclass(slots=True)
class Skipped:
    """Spans left out of the parsed document: unreadable, or no GenAI content."""

    invalid: int = 0  # unreadable: invalid ids, or a field that does not parse
    dropped: int = 0  # valid ids, no GenAI content
    per_trace: Counter[bytes] = field(default_factory=Counter)  # left-out spans per trace id
    roots: set[bytes] = field(default_factory=set)  # trace ids of left-out root spans
    problem: str | None = None  # why the first unreadable span (or resource part) was left out

    def unreadable(self, reason: str, trace_id: bytes = b"", parent_id: bytes = b"") -> None:
        """Count one unreadable span; with its ids, it still counts for its trace."""
        self.invalid += 1
        self.note(reason)
        if trace_id:
            self.per_trace[trace_id] += 1
            if is_root(parent_id):
                self.roots.add(trace_id)

    def note(self, reason: str) -> None:
        """Remember the first reason something was left out (one log line per record)."""
        if self.problem is None:
            self.problem = reason


def parse_otlp_json(value: bytes) -> tuple[TracesData, Skipped]:
    """One OTLP/JSON document -> its GenAI spans as ``TracesData``, and the spans left out."""
    try:
        document = json.loads(value)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise DecodeError(f"not JSON: {one_line(e)}") from e
    if not isinstance(document, dict):
        raise DecodeError(f"OTLP JSON must be an object, got {type(document).__name__}")
    data, skipped = TracesData(), Skipped()
    for resource_spans in _objects(document, "resourceSpans", "resource_spans"):
        target = data.resource_spans.add()
        kept = 0
        for scope_spans in _objects(resource_spans, "scopeSpans", "scope_spans"):
            scope = target.scope_spans.add()
            for span in _objects(scope_spans, "spans", "spans", frame=False):
                kept += _parse_span(span, scope, skipped)
        if kept:  # a resource is read only for the spans that carry it
            _parse_resource(_field(resource_spans, "resource", "resource"), target.resource,
                            skipped)
    return data, skipped


def id_bytes(text: object, size: int) -> bytes:
    """A hex or base64 id -> its bytes; b"" when it is neither, or not ``size`` bytes long."""
    if not isinstance(text, str):
        return b""
    try:
        if len(text) == 2 * size:
            raw = bytes.fromhex(text)
        else:  # base64, standard or URL-safe, padded or not
            padded = text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4)
            raw = base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return b""
    return raw if len(raw) == size else b""


def _parse_span(span: object, scope: ScopeSpans, skipped: Skipped) -> int:
    """Parse a GenAI span into ``scope`` (1); count any other, or an unreadable one (0)."""
    if not isinstance(span, dict):
        skipped.unreadable(f"a span is not a JSON object but {type(span).__name__}")
        return 0
    trace_id = id_bytes(_field(span, "traceId", "trace_id"), TRACE_ID_BYTES)
    span_id = id_bytes(_field(span, "spanId", "span_id"), SPAN_ID_BYTES)
    parent = _field(span, "parentSpanId", "parent_span_id")
    parent_id = id_bytes(parent, SPAN_ID_BYTES) if parent else b""
    if not valid_ids(trace_id, span_id, parent_id) or (parent and not parent_id):
        skipped.unreadable(INVALID_IDS)
        return 0
    if not json_has_genai_content(span):
        skipped.dropped += 1
        skipped.per_trace[trace_id] += 1
        if is_root(parent_id):
            skipped.roots.add(trace_id)
        return 0
    _rewrite_ids(span)
    links = span.get("links")
    for link in links if isinstance(links, list) else ():
        if isinstance(link, dict):
            _rewrite_ids(link)
    try:
        json_format.ParseDict(span, scope.spans.add(), ignore_unknown_fields=True)
    except PARSE_ERRORS as e:
        del scope.spans[-1]  # half filled: ParseDict stops at the first bad field
        skipped.unreadable(f"span {span_id.hex()}: {bad_field(e)}", trace_id, parent_id)
        return 0
    return 1


def _parse_resource(resource: object, target: Resource, skipped: Skipped) -> None:
    """The resource whole; failing that, each of its attributes that parses."""
    if resource is None:
        return
    if not isinstance(resource, dict):
        skipped.note(f"a resource is not a JSON object but {type(resource).__name__}")
        return
    try:
        json_format.ParseDict(resource, target, ignore_unknown_fields=True)
        return
    except PARSE_ERRORS as e:
        target.Clear()
        skipped.note(f"resource partly unreadable: {bad_field(e)}")
    pairs = resource.get("attributes")
    for pair in pairs if isinstance(pairs, list) else ():
        try:
            json_format.ParseDict(pair, target.attributes.add(), ignore_unknown_fields=True)
        except PARSE_ERRORS:
            del target.attributes[-1]


def _rewrite_ids(node: dict[str, Any]) -> None:
    """Hex or base64 ids -> the base64 ``ParseDict`` reads bytes from ("" when invalid)."""
    for key, size in _ID_KEYS.items():
        if node.get(key):
            node[key] = base64.b64encode(id_bytes(node[key], size)).decode("ascii")


def _objects(node: dict[str, Any], camel: str, proto: str, frame: bool = True) -> list[Any]:
    """The list under either spelling of a key; ``DecodeError`` when it is not a list (of
    objects, for the ``TracesData`` frame: its spans are checked one by one)."""
    items: list[Any] = []
    for key in dict.fromkeys((camel, proto)):
        value = node.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or (
            frame and not all(isinstance(item, dict) for item in value)
        ):
            raise DecodeError(f"not an OTLP TracesData: {key} is not a list of objects")
        items += value
    return items


def _field(node: dict[str, Any], camel: str, proto: str) -> object:
    return node.get(camel, node.get(proto))


def one_line(error: BaseException) -> str:
    """An error's text on one line, cut to 300 characters."""
    return " ".join(str(error).split())[:300]


def bad_field(error: BaseException) -> str:
    """Which field failed to parse and how, never its value: protobuf's message may quote the
    value (``invalid literal for int(): 'sk-...'``), and span attributes may hold secrets or
    personal data that must not reach a log line. Only the two parts protobuf writes around
    the value are read: the chain of field names it starts with, and the position it may end
    with (`` at Span.attributes[0].value.intValue.``); the value, between them, may contain
    anything, " at " included."""
    if isinstance(error, SystemError) and isinstance(error.__cause__ or error.__context__,
                                                     UnicodeError):
        return "lone surrogate"
    text = str(error)
    located = _AT_FIELD.search(text)
    path = located.group(1) if located else ".".join(_leading_fields(text))
    kind = next((name for marker, name in _FAILURE_KINDS if marker in text), "bad value")
    return f"{kind} in {path}" if path else kind


def _leading_fields(text: str) -> list[str]:
    fields = []
    while (found := _FAILED_FIELD.match(text)) is not None:
        fields.append(found.group(1))
        text = text[found.end():]
    return fields
