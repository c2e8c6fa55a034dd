"""Which OTLP spans are kept: valid W3C ids and GenAI content (pure).

One decision, read two ways: on the protobuf objects (``otlp_proto``, and ``otlp_json`` after
``ParseDict``) and on the JSON objects before ``ParseDict`` (so dropped spans never pay for
it); both read the same prefixes and the same id rules.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan

TRACE_ID_BYTES = 16
SPAN_ID_BYTES = 8
ZERO_SPAN_ID = bytes(SPAN_ID_BYTES)
_ZERO_TRACE_ID = bytes(TRACE_ID_BYTES)
ROOT_PARENT_IDS = (b"", ZERO_SPAN_ID)  # what a root's parent span id is written as
_PARENT_ID_SIZES = (0, SPAN_ID_BYTES)

# A span has GenAI content when one of its attribute keys (or an event's name or attribute
# key) starts with one of these: an OpenInference kind, the OTel GenAI conventions, Langfuse.
# Resource attributes do not count: they are the same on every span of the service.
GENAI_KEY_PREFIXES = ("openinference.span.kind", "gen_ai.", "langfuse.")
_KIND, _GENAI, _LANGFUSE = (prefix.encode() for prefix in GENAI_KEY_PREFIXES)


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
    substring search in C is far cheaper than reading every key as a Python string. (Three
    ``in`` tests, not ``any`` over a generator: this runs once per record and per scope.)
    """
    return _KIND in encoded or _GENAI in encoded or _LANGFUSE in encoded


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
