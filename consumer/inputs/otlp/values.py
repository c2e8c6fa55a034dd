"""OTLP ``AnyValue`` and key-value lists -> plain Python values, cut to bounds (pure).

A hostile or careless producer can put a 10 MB string or a million-item array in one
attribute; those are cut here, not refused, so the rest of the span (and the trace) survives.
``Cuts`` counts what was cut so the caller can say so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from consumer.telemetry.spans import AttributeValue

MAX_ATTRIBUTE_CHARS = 100_000  # per string (characters) or bytes value (bytes)
MAX_ARRAY_ITEMS = 1_000  # per array, and per key-value list
MAX_DEPTH = 8  # arrays and key-value lists nested deeper are cut to empty


@dataclass(slots=True)
class Cuts:
    """How many values were cut while converting one record."""

    count: int = 0


def attributes(pairs: Iterable[KeyValue], cuts: Cuts, depth: int = 0) -> dict[str, AttributeValue]:
    """Key-value pairs -> a dict; a key without a value is left out, a repeated key's last wins."""
    converted: dict[str, AttributeValue] = {}
    for index, pair in enumerate(pairs):
        if index >= MAX_ARRAY_ITEMS:
            cuts.count += 1
            break
        value = any_value(pair.value, cuts, depth)
        if value is not None:
            converted[pair.key] = value
    return converted


def any_value(value: AnyValue, cuts: Cuts, depth: int = 0) -> AttributeValue:
    """One ``AnyValue`` -> str, bool, int, float, bytes, tuple or dict; None when it is empty."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return _cut(value.string_value, cuts)
    if kind == "bool_value":
        return value.bool_value
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        return value.double_value
    if kind == "bytes_value":
        return _cut(value.bytes_value, cuts)
    if kind in ("array_value", "kvlist_value") and depth >= MAX_DEPTH:
        cuts.count += 1
        return () if kind == "array_value" else {}
    if kind == "array_value":
        items = value.array_value.values
        if len(items) > MAX_ARRAY_ITEMS:
            cuts.count += 1
        return tuple(any_value(item, cuts, depth + 1) for item in items[:MAX_ARRAY_ITEMS])
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values, cuts, depth + 1)
    return None


def _cut(text: str | bytes, cuts: Cuts) -> str | bytes:
    if len(text) <= MAX_ATTRIBUTE_CHARS:
        return text
    cuts.count += 1
    return text[:MAX_ATTRIBUTE_CHARS]
