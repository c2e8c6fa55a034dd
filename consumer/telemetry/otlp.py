"""One Kafka record of OTLP spans -> the GenAI spans it carries, and what it dropped (pure).

The collector's Kafka exporter writes a whole batch per record: a ``TracesData`` (the same wire
shape as ``ExportTraceServiceRequest``) with spans of one or many traces, most of them HTTP,
database or queue spans with no GenAI content. Those are dropped here and only counted; of
them only one fact is kept, whether the trace's root arrived (it is often an HTTP server span),
because assembly closes a trace sooner once its root is in.

Speed: a record of 100 spans of which 95 are dropped must cost little, so the keep decision
reads only attribute keys and event names on the protobuf objects; Python values are built
for kept spans alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from google.protobuf.message import DecodeError as ProtobufDecodeError
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from consumer.errors import DecodeError
from consumer.telemetry.keep import (
    has_genai_content,
    is_root,
    mentions_genai,
    valid_ids,
)
from consumer.telemetry.otlp_json import Skipped, parse_otlp_json
from consumer.telemetry.otlp_values import MAX_ARRAY_ITEMS, MAX_ATTRIBUTE_CHARS, Cuts, attributes
from consumer.telemetry.spans import Attributes, Span, SpanEvent

OtlpEncoding = Literal["otlp_proto", "otlp_json"]


@dataclass(slots=True)
class DecodedRecord:
    """What one record carried: the kept GenAI spans, and counts of the rest."""

    kept: list[Span] = field(default_factory=list)
    dropped: int = 0  # spans not kept: no GenAI content, or invalid ids (counted in both)
    invalid: int = 0  # spans dropped for a missing or malformed trace or span id
    roots_seen: set[str] = field(default_factory=set)  # traces whose root span is in this record
    spans_per_trace: dict[str, int] = field(default_factory=dict)  # every valid span, kept or not
    cut_values: int = 0  # attribute values cut to the bounds in ``otlp_values``


def decode_otlp(value: bytes, encoding: OtlpEncoding) -> DecodedRecord:
    """A record's value -> ``DecodedRecord``; ``DecodeError`` when it is no ``TracesData``."""
    data, skipped = _parse(value, encoding)
    if not data.resource_spans:
        raise DecodeError(f"{encoding} record holds no resourceSpans: not a TracesData")
    record = DecodedRecord(dropped=skipped.dropped + skipped.invalid, invalid=skipped.invalid)
    per_trace, roots, cuts = skipped.per_trace, skipped.roots, Cuts()
    # No GenAI key anywhere in the protobuf bytes: no span needs its keys read. (JSON may
    # escape a key's letters; its spans were already filtered on the parsed objects.)
    may_keep = encoding == "otlp_json" or mentions_genai(value)
    for resource_spans in data.resource_spans:
        resource: Attributes | None = None  # converted once, and only if a span is kept
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                trace_id, parent = span.trace_id, span.parent_span_id
                if not valid_ids(trace_id, span.span_id, parent):
                    record.invalid += 1
                    record.dropped += 1
                    continue
                per_trace[trace_id] += 1
                if is_root(parent):
                    roots.add(trace_id)
                # The byte search first: reading 95 dropped spans' keys as Python strings
                # costs more than serializing them again and searching in C.
                if not (
                    may_keep
                    and mentions_genai(span.SerializeToString())
                    and has_genai_content(span)
                ):
                    record.dropped += 1
                    continue
                if resource is None:
                    resource = _resource(resource_spans.resource, cuts)
                record.kept.append(_span(span, resource, cuts))
    record.roots_seen = {trace_id.hex() for trace_id in roots}
    record.spans_per_trace = {trace_id.hex(): n for trace_id, n in per_trace.items()}
    record.cut_values = cuts.count
    return record


def _parse(value: bytes, encoding: OtlpEncoding) -> tuple[TracesData, Skipped]:
    if encoding == "otlp_json":
        return parse_otlp_json(value)
    data = TracesData()
    try:
        data.ParseFromString(value)
    except ProtobufDecodeError as e:
        raise DecodeError(f"not an OTLP protobuf TracesData: {e}") from e
    return data, Skipped()


def _resource(resource: Resource, cuts: Cuts) -> Attributes:
    # One read-only mapping shared by every kept span of the resource.
    return MappingProxyType(attributes(resource.attributes, cuts))


def _span(span: OtlpSpan, resource: Attributes, cuts: Cuts) -> Span:
    parent = span.parent_span_id
    if len(span.events) > MAX_ARRAY_ITEMS:
        cuts.count += 1
    return Span(
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=None if is_root(parent) else parent.hex(),
        name=span.name[:MAX_ATTRIBUTE_CHARS],
        start_unix_nano=span.start_time_unix_nano,
        end_unix_nano=span.end_time_unix_nano,
        attributes=attributes(span.attributes, cuts),
        events=tuple(
            SpanEvent(event.name, event.time_unix_nano, attributes(event.attributes, cuts))
            for event in span.events[:MAX_ARRAY_ITEMS]
        ),
        resource=resource,
    )
