"""OTLP/JSON bytes -> the protobuf ``TracesData`` of its GenAI spans, and what was left out (pure).

OTLP/JSON is protobuf's JSON mapping with three changes (the OTLP specification, "JSON
Protobuf Encoding"): trace and span ids are hex strings, not base64; enums are integers;
keys are lowerCamelCase. ``json_format.ParseDict`` already takes either key spelling, enums as
integers and 64-bit integers as strings or numbers, so only the ids need rewriting before it.

``ParseDict`` is pure Python and slow, so spans are filtered on the JSON objects first (the
rules of ``keep``) and only the kept ones are parsed; the others are counted in ``Skipped``.

Base64 ids (protobuf's canonical JSON, a common mistake of hand-rolled exporters) are accepted:
the lengths never collide (a trace id is 32 hex digits or 24 base64 characters, a span id 16
or 12), so reading one for the other is impossible. A span whose id is neither is dropped and
counted as invalid, alone: the rest of the record is read.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from consumer.errors import DecodeError
from consumer.telemetry.keep import (
    SPAN_ID_BYTES,
    TRACE_ID_BYTES,
    is_root,
    json_has_genai_content,
    valid_ids,
)

_ID_KEYS = {  # both spellings, as ParseDict accepts both
    "traceId": TRACE_ID_BYTES,
    "trace_id": TRACE_ID_BYTES,
    "spanId": SPAN_ID_BYTES,
    "span_id": SPAN_ID_BYTES,
    "parentSpanId": SPAN_ID_BYTES,
    "parent_span_id": SPAN_ID_BYTES,
}


@dataclass(slots=True)
class Skipped:
    """Spans left out of the parsed document: invalid ids, or no GenAI content."""

    invalid: int = 0
    dropped: int = 0  # valid ids, no GenAI content
    per_trace: Counter[bytes] = field(default_factory=Counter)  # dropped spans per trace id
    roots: set[bytes] = field(default_factory=set)  # trace ids of dropped root spans


def parse_otlp_json(value: bytes) -> tuple[TracesData, Skipped]:
    """One OTLP/JSON document -> its GenAI spans as ``TracesData``, and the spans left out."""
    try:
        document = json.loads(value)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise DecodeError(f"not JSON: {_one_line(e)}") from e
    if not isinstance(document, dict):
        raise DecodeError(f"OTLP JSON must be an object, got {type(document).__name__}")
    skipped = Skipped()
    for scope_spans in _scope_spans(document):
        spans = scope_spans.get("spans")
        if isinstance(spans, list):
            scope_spans["spans"] = [s for s in spans if _keep(s, skipped)]
    data = TracesData()
    try:
        json_format.ParseDict(document, data, ignore_unknown_fields=True)
    except (json_format.ParseError, RecursionError, TypeError, ValueError) as e:
        raise DecodeError(f"not an OTLP TracesData: {_one_line(e)}") from e
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


def _keep(span: object, skipped: Skipped) -> bool:
    """Keep a GenAI span (its ids rewritten for ``ParseDict``); count the others."""
    if not isinstance(span, dict):
        return True  # not a span object: ParseDict refuses the document
    trace_id = id_bytes(_field(span, "traceId", "trace_id"), TRACE_ID_BYTES)
    span_id = id_bytes(_field(span, "spanId", "span_id"), SPAN_ID_BYTES)
    parent = _field(span, "parentSpanId", "parent_span_id")
    parent_id = id_bytes(parent, SPAN_ID_BYTES) if parent else b""
    if not valid_ids(trace_id, span_id, parent_id) or (parent and not parent_id):
        skipped.invalid += 1
        return False
    if not json_has_genai_content(span):
        skipped.dropped += 1
        skipped.per_trace[trace_id] += 1
        if is_root(parent_id):
            skipped.roots.add(trace_id)
        return False
    _rewrite_ids(span)
    links = span.get("links")
    for link in links if isinstance(links, list) else ():
        if isinstance(link, dict):
            _rewrite_ids(link)
    return True


def _rewrite_ids(node: dict[str, Any]) -> None:
    """Hex or base64 ids -> the base64 ``ParseDict`` reads bytes from ("" when invalid)."""
    for key, size in _ID_KEYS.items():
        if node.get(key):
            node[key] = base64.b64encode(id_bytes(node[key], size)).decode("ascii")


def _scope_spans(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Every scope-spans object; wrong shapes are left for ``ParseDict`` to refuse."""
    found = []
    for resource_spans in _list(document, "resourceSpans", "resource_spans"):
        if isinstance(resource_spans, dict):
            found += [
                scope
                for scope in _list(resource_spans, "scopeSpans", "scope_spans")
                if isinstance(scope, dict)
            ]
    return found


def _field(node: dict[str, Any], camel: str, proto: str) -> object:
    return node.get(camel, node.get(proto))


def _list(node: dict[str, Any], *keys: str) -> list[Any]:
    items: list[Any] = []
    for key in keys:
        value = node.get(key)
        if isinstance(value, list):
            items += value
    return items


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]
