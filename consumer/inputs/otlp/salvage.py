"""An OTLP protobuf batch that protobuf refused whole -> the spans of it that parse (pure).

protobuf (upb, the implementation installed here) checks that every ``string`` field is valid
UTF-8 and refuses the whole message otherwise: one span with a bad byte in an attribute, an
event or its name would cost the batch, often many traces. Not every producer checks its
strings on the way (an SDK in another language, a pipeline that copies bytes through), so
such a span can reach the topic.

So when ``TracesData`` fails to parse, its frame is walked with protobuf's own parser: each
level (``TracesData`` -> ``ResourceSpans`` -> ``ScopeSpans``) is parsed as ``Empty``, whose
fields all land as unknown fields, raw bytes and never checked as text, and each span is
then parsed alone with the generated ``Span`` class. A span that still fails is left out
alone and counted as unreadable (its ids, read from its raw fields when they are whole, still
count it for its trace and its root); a resource that fails keeps the attributes that parse;
the scope (unused) is not read. Only a frame that is not protobuf at all, or holds no span,
raises ``DecodeError``: the record is dead-lettered with protobuf's reason.
"""

from __future__ import annotations

from collections import defaultdict

from google.protobuf.empty_pb2 import Empty
from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, TracesData
from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan

from consumer.errors import DecodeError
from consumer.inputs.otlp.json_spans import Skipped
from consumer.inputs.otlp.span_filter import valid_ids

_LENGTH_DELIMITED = 2  # the wire type of bytes, strings and messages


def _number(message: type[Message], name: str) -> int:
    return message.DESCRIPTOR.fields_by_name[name].number


# Field numbers from the generated classes' descriptors, not written out by hand.
_RESOURCE_SPANS = _number(TracesData, "resource_spans")
_RESOURCE = _number(ResourceSpans, "resource")
_SCOPE_SPANS = _number(ResourceSpans, "scope_spans")
_SPANS = _number(ScopeSpans, "spans")
_ATTRIBUTES = _number(Resource, "attributes")
_TRACE_ID = _number(OtlpSpan, "trace_id")
_SPAN_ID = _number(OtlpSpan, "span_id")
_PARENT_SPAN_ID = _number(OtlpSpan, "parent_span_id")


def salvage_traces_data(value: bytes, error: ProtobufDecodeError) -> tuple[TracesData, Skipped]:
    """The parts of ``value`` that parse, and the spans left out; ``DecodeError`` (with
    ``error``'s reason) when its frame is no protobuf or it holds no span at all."""
    reason = f"not an OTLP protobuf TracesData: {error}"
    data, skipped = TracesData(), Skipped()
    spans_found = 0
    for resource_spans in _fields(value, reason)[_RESOURCE_SPANS]:
        target = data.resource_spans.add()
        parts = _fields(resource_spans, reason)
        for scope_spans in parts[_SCOPE_SPANS]:
            scope = target.scope_spans.add()
            for span in _fields(scope_spans, reason)[_SPANS]:
                spans_found += 1
                _parse_span(span, scope, skipped)
        for resource in parts[_RESOURCE]:  # protobuf merges a repeated message field
            _merge_resource(resource, target.resource, skipped)
    if not spans_found:
        raise DecodeError(reason)
    return data, skipped


def _fields(encoded: bytes, reason: str) -> defaultdict[int, list[bytes]]:
    """The length-delimited fields of one message level, raw, by field number."""
    frame = Empty()
    try:
        frame.ParseFromString(encoded)
    except ProtobufDecodeError as e:
        raise DecodeError(reason) from e
    found: defaultdict[int, list[bytes]] = defaultdict(list)
    unknowns = UnknownFieldSet(frame)
    for index in range(len(unknowns)):  # indexed: the stubs declare no __iter__
        unknown = unknowns[index]
        if unknown.wire_type == _LENGTH_DELIMITED:
            found[unknown.field_number].append(unknown.data)
    return found


def _parse_span(encoded: bytes, scope: ScopeSpans, skipped: Skipped) -> None:
    span = scope.spans.add()
    try:
        span.ParseFromString(encoded)
    except ProtobufDecodeError as e:
        del scope.spans[-1]
        trace_id, parent_id = _ids(encoded)
        skipped.unreadable(f"a span does not parse: {e}", trace_id, parent_id)


def _ids(encoded: bytes) -> tuple[bytes, bytes]:
    """An unreadable span's trace and parent ids, when its raw fields hold valid ones."""
    try:
        fields = _fields(encoded, "")
    except DecodeError:
        return b"", b""

    def last(number: int) -> bytes:
        return fields[number][-1] if fields[number] else b""

    trace_id, span_id, parent_id = last(_TRACE_ID), last(_SPAN_ID), last(_PARENT_SPAN_ID)
    if not valid_ids(trace_id, span_id, parent_id):
        return b"", b""
    return trace_id, parent_id


def _merge_resource(encoded: bytes, target: Resource, skipped: Skipped) -> None:
    """The resource whole; failing that, each of its attributes that parses."""
    resource = Resource()
    try:
        resource.ParseFromString(encoded)
    except ProtobufDecodeError as e:
        skipped.note(f"resource partly unreadable: {e}")
        resource = _readable_attributes(encoded)
    target.MergeFrom(resource)


def _readable_attributes(encoded: bytes) -> Resource:
    resource = Resource()
    try:
        pairs = _fields(encoded, "")[_ATTRIBUTES]
    except DecodeError:
        return resource
    for pair in pairs:
        attribute = KeyValue()
        try:
            attribute.ParseFromString(pair)
        except ProtobufDecodeError:
            continue
        resource.attributes.append(attribute)
    return resource
