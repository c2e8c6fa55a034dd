"""Which OTLP spans are kept: valid W3C ids and GenAI content (pure).

One decision, read two ways: on the protobuf objects (``otlp_proto``, and ``otlp_json`` after
``ParseDict``) and on the JSON objects before ``ParseDict`` (so dropped spans never pay for
it); both read the same prefixes and the same id rules.

For ``otlp_proto`` a byte search comes first (``mentions_genai``, ``scopes_may_keep``): reading
a span's keys builds a Python object per attribute, and 95 spans of 100 have none to find.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.empty_pb2 import Empty
from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.protobuf.unknown_fields import UnknownFieldSet
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, TracesData
from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan

TRACE_ID_BYTES = 16
SPAN_ID_BYTES = 8
ZERO_SPAN_ID = bytes(SPAN_ID_BYTES)
_ZERO_TRACE_ID = bytes(TRACE_ID_BYTES)
ROOT_PARENT_IDS = (b"", ZERO_SPAN_ID)  # what a root's parent span id is written as
_PARENT_ID_SIZES = (0, SPAN_ID_BYTES)

# A span has GenAI content when one of its attribute keys (or an event's name or attribute
# key) starts with one of these: an OpenInference kind, the OTel GenAI conventions, Langfuse,
# OpenLLMetry's workflow and task spans (its SDK's decorators record their output there, and
# nothing under ``gen_ai.``). Resource attributes do not count: they are the same on every
# span of the service.
GENAI_KEY_PREFIXES = ("openinference.span.kind", "gen_ai.", "langfuse.", "traceloop.span.kind")
_GENAI, _LANGFUSE = b"gen_ai.", b"langfuse."
# OpenInference's and OpenLLMetry's kinds share a suffix: one scan of the bytes finds either
# (a false match, "otel.span.kind", only costs reading that scope's keys).
_SPAN_KIND = b".span.kind"


def valid_ids(trace_id: bytes, span_id: bytes, parent_span_id: bytes) -> bool:
    """16- and 8-byte ids, not all zero; a parent is empty (a root) or 8 bytes."""
    return (
        len(trace_id) == TRACE_ID_BYTES
        and len(span_id) == SPAN_ID_BYTES
        and trace_id != _ZERO_TRACE_ID
        and span_id != ZERO_SPAN_ID
        and len(parent_span_id) in _PARENT_ID_SIZES
    )


def is_root(parent_span_id: bytes) -> bool:
    """No parent: empty, or all zero as some exporters write it."""
    return parent_span_id in ROOT_PARENT_IDS


def mentions_genai(encoded: bytes) -> bool:
    """Could these protobuf bytes hold a GenAI key? False is certain, True is to be checked.

    Protobuf stores strings as raw UTF-8, so a key that is there is in the bytes verbatim; a
    substring search in C is far cheaper than reading every key as a Python string.
    """
    return _GENAI in encoded or _SPAN_KIND in encoded or _LANGFUSE in encoded


def scopes_may_keep(value: bytes, data: TracesData) -> list[bool]:
    """For each ``ScopeSpans`` of ``data`` (parsed from ``value``), in order: could one of its
    spans be kept? False is certain, True is to be checked span by span.

    A scope is one instrumentation library (an HTTP server, a database client, an LLM
    framework), so most scopes of a record that mentions GenAI hold no GenAI key at all, and
    their spans need only their ids read. Each is searched as it was sent, its bytes read with
    protobuf's own parser as ``Empty`` (whose fields land raw): cheaper than serializing it again.
    """
    if not mentions_genai(value):
        return [False] * sum(len(resource.scope_spans) for resource in data.resource_spans)
    return [mentions_genai(scope) for scope in _sent_scopes(value, data)]


_RESOURCE_SPANS = TracesData.DESCRIPTOR.fields_by_name["resource_spans"].number
_SCOPE_SPANS = ResourceSpans.DESCRIPTOR.fields_by_name["scope_spans"].number
_LENGTH_DELIMITED = 2  # the wire type of bytes, strings and messages


def _sent_scopes(value: bytes, data: TracesData) -> list[bytes]:
    """``data``'s scopes as ``value`` holds them (``otlp_salvage`` keeps that shape when it
    reads a batch span by span); serialized again should the two not line up."""
    sent: list[bytes] = []
    resources = _raw_fields(value, _RESOURCE_SPANS)
    if len(resources) == len(data.resource_spans):
        for encoded, resource in zip(resources, data.resource_spans, strict=True):
            scopes = _raw_fields(encoded, _SCOPE_SPANS)
            if len(scopes) != len(resource.scope_spans):
                break
            sent += scopes
        else:
            return sent
    return [scope.SerializeToString() for resource in data.resource_spans
            for scope in resource.scope_spans]


def _raw_fields(encoded: bytes, number: int) -> list[bytes]:
    """One message level's length-delimited fields ``number``, raw, in order ([] if no
    protobuf)."""
    frame = Empty()
    try:
        frame.ParseFromString(encoded)
    except ProtobufDecodeError:
        return []
    unknowns = UnknownFieldSet(frame)
    found = []
    for index in range(len(unknowns)):  # indexed: the stubs declare no __iter__
        unknown = unknowns[index]
        if unknown.field_number == number and unknown.wire_type == _LENGTH_DELIMITED:
            found.append(unknown.data)
    return found


def has_genai_content(span: OtlpSpan) -> bool:
    """Any attribute key, event name or event attribute key from a GenAI convention."""
    for pair in span.attributes:
        if pair.key.startswith(GENAI_KEY_PREFIXES):
            return True
    for event in span.events:
        if event.name.startswith(GENAI_KEY_PREFIXES):
            return True
        for pair in event.attributes:
            if pair.key.startswith(GENAI_KEY_PREFIXES):
                return True
    return False


def json_has_genai_content(span: dict[str, Any]) -> bool:
    """``has_genai_content`` on an OTLP/JSON span object, wrong shapes reading as no content."""
    if _json_keys_genai(span.get("attributes")):
        return True
    events = span.get("events")
    for event in events if isinstance(events, list) else ():
        if isinstance(event, dict):
            name = event.get("name")
            if isinstance(name, str) and name.startswith(GENAI_KEY_PREFIXES):
                return True
            if _json_keys_genai(event.get("attributes")):
                return True
    return False


def _json_keys_genai(pairs: object) -> bool:
    if not isinstance(pairs, list):
        return False
    for pair in pairs:
        key = pair.get("key") if isinstance(pair, dict) else None
        if isinstance(key, str) and key.startswith(GENAI_KEY_PREFIXES):
            return True
    return False
