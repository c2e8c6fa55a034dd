"""One Kafka record of OTLP spans -> the GenAI spans it carries, and what it dropped (pure).

The collector's Kafka exporter writes a whole batch per record: a ``TracesData`` (the same wire
shape as ``ExportTraceServiceRequest``) with spans of one or many traces, most of them HTTP,
database or queue spans with no GenAI content. Those are dropped here and only counted; of
them only one fact is kept, whether the trace's root arrived (it is often an HTTP server span),
because assembly closes a trace sooner once its root is in.

One bad span (invalid UTF-8 in a protobuf string, a JSON ``intValue`` that is no integer, an
attribute of the wrong type, no valid ids) is left out alone, counted as ``invalid``, and one
warning per record names the first reason; the record's other spans are read (see
``otlp_salvage`` and ``otlp_json``). ``DecodeError``, and so the dead-letter topic, is for a
record that is no ``TracesData`` at all: garbage bytes, not JSON, no spans in a frame.

Speed: a record of 100 spans of which 95 are dropped must cost little. Every span's ids are
read (valid ids, its trace's span count, a root); its keys only when its scope's bytes mention
a GenAI key (``keep.scopes_may_keep``); Python values are built for kept spans alone, and a
resource's once for as long as the service sends the same one.
"""

from __future__ import annotations

from itertools import repeat
from types import MappingProxyType

from google.protobuf.message import DecodeError as ProtobufDecodeError
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status, TracesData

from consumer.errors import DecodeError
from consumer.inputs import OtlpEncoding
from consumer.inputs.otlp.json_spans import INVALID_IDS, Skipped, parse_otlp_json
from consumer.inputs.otlp.salvage import salvage_traces_data
from consumer.inputs.otlp.span_filter import (
    ROOT_PARENT_IDS,
    has_genai_content,
    is_root,
    scopes_may_keep,
    valid_ids,
)
from consumer.inputs.otlp.values import MAX_ARRAY_ITEMS, MAX_ATTRIBUTE_CHARS, Cuts, attributes
from consumer.telemetry.spans import Attributes, DecodedRecord, Span, SpanEvent

# The OTel semantic conventions' names for how an operation failed.
ERROR_TYPE = "error.type"
EXCEPTION_EVENT = "exception"
EXCEPTION_TYPE = "exception.type"
EXCEPTION_MESSAGE = "exception.message"



def decode_otlp(value: bytes, encoding: OtlpEncoding) -> DecodedRecord:
    """A record's value -> ``DecodedRecord``; ``DecodeError`` when it is no ``TracesData``."""
    data, skipped = _parse(value, encoding)
    if not data.resource_spans:
        raise DecodeError(f"{encoding} record holds no resourceSpans: not a TracesData")
    kept: list[Span] = []
    traces: list[bytes] = []  # the trace id of every span with valid ids, kept or not
    roots, cuts, spans, invalid = skipped.roots, Cuts(), 0, 0
    # The scopes whose keys are worth reading. (JSON may escape a key's letters; its spans
    # were already filtered on the parsed objects.)
    may_keep = iter(scopes_may_keep(value, data) if encoding == "otlp_proto" else repeat(True))
    for resource_spans in data.resource_spans:
        resource: Attributes | None = None  # converted once, and only if a span is kept
        for scope_spans in resource_spans.scope_spans:
            spans += len(scope_spans.spans)
            scope_may_keep = next(may_keep)
            for span in scope_spans.spans:
                trace_id, parent = span.trace_id, span.parent_span_id
                if not valid_ids(trace_id, span.span_id, parent):
                    invalid += 1
                    continue
                traces.append(trace_id)
                if parent in ROOT_PARENT_IDS:
                    roots.add(trace_id)
                if scope_may_keep and has_genai_content(span):
                    if resource is None:
                        resource = _resource(resource_spans.resource, cuts)
                    kept.append(_span(span, trace_id, parent, resource, cuts))
    per_trace = skipped.per_trace
    per_trace.update(traces)  # counted in C, not span by span
    return DecodedRecord(
        kept=kept,
        dropped=skipped.dropped + skipped.invalid + spans - len(kept),
        invalid=skipped.invalid + invalid,
        roots_seen={trace_id.hex() for trace_id in roots},
        spans_per_trace={trace_id.hex(): n for trace_id, n in per_trace.items()},
        cut_values=cuts.count,
        problem=skipped.problem or (INVALID_IDS if invalid else None),
    )


def _parse(value: bytes, encoding: OtlpEncoding) -> tuple[TracesData, Skipped]:
    if encoding == "otlp_json":
        return parse_otlp_json(value)
    data = TracesData()
    try:
        data.ParseFromString(value)
    except ProtobufDecodeError as e:  # maybe one bad span: read the others
        return salvage_traces_data(value, e)
    return data, Skipped()


# A service sends the same resource with every record: its attributes are converted once and
# the read-only mapping shared by every kept span of it, in this record and the next ones (for
# small resources, and a bounded number of them).
_MEMO_RESOURCE_BYTES = 16_384
_MEMO_RESOURCES = 256
_resources: dict[bytes, tuple[Attributes, int]] = {}  # encoded -> attributes, values cut


def _resource(resource: Resource, cuts: Cuts) -> Attributes:
    encoded = resource.SerializeToString()
    known = _resources.get(encoded)
    if known is None:
        own = Cuts()
        known = MappingProxyType(attributes(resource.attributes, own)), own.count
        if len(encoded) <= _MEMO_RESOURCE_BYTES:
            if len(_resources) >= _MEMO_RESOURCES:
                _resources.clear()
            _resources[encoded] = known
    converted, cut = known
    cuts.count += cut
    return converted


def _span(
    span: OtlpSpan, trace_id: bytes, parent: bytes, resource: Attributes, cuts: Cuts
) -> Span:
    events = span.events
    if len(events) > MAX_ARRAY_ITEMS:
        cuts.count += 1
    return Span(
        trace_id=trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=None if is_root(parent) else parent.hex(),
        name=span.name[:MAX_ATTRIBUTE_CHARS],
        start_unix_nano=span.start_time_unix_nano,
        end_unix_nano=span.end_time_unix_nano,
        attributes=attributes(span.attributes, cuts),
        events=tuple(
            SpanEvent(event.name, event.time_unix_nano, attributes(event.attributes, cuts))
            for event in events[:MAX_ARRAY_ITEMS]
        ) if events else (),
        resource=resource,
        error=_failure(span) if span.status.code == Status.STATUS_CODE_ERROR else None,
    )


def _failure(span: OtlpSpan) -> str:
    """Why a span with status ERROR failed: its status message, else ``error.type``, else
    its first ``exception`` event (type: message), else just that it failed."""
    if span.status.message:
        return span.status.message[:MAX_ATTRIBUTE_CHARS]
    for attribute in span.attributes:
        if attribute.key == ERROR_TYPE and attribute.value.string_value:
            return attribute.value.string_value[:MAX_ATTRIBUTE_CHARS]
    for event in span.events:
        if event.name == EXCEPTION_EVENT:
            found = {a.key: a.value.string_value for a in event.attributes}
            described = ": ".join(part for part in (found.get(EXCEPTION_TYPE),
                                                     found.get(EXCEPTION_MESSAGE)) if part)
            if described:
                return described[:MAX_ATTRIBUTE_CHARS]
    return "failed"
