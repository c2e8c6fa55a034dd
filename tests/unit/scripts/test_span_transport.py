"""Spans leaving the demo's service (scripts/span_transport.py): without a collector, records
as the collector's Kafka exporter writes them with ``partition_traces_by_id`` (one trace per
record, keyed by its hex trace id, in either encoding); and a burst larger than the SDK's
default queue, or an exporter that fails, is noticed rather than silently short."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, set_span_in_context

from consumer.inputs.otlp.decode import decode_otlp
from scripts.span_transport import ENCODINGS, SpanEncoding, SpanRoute, records_for, to_records

RESOURCE = Resource.create({"service.name": "rag-api"})


def three_traces() -> list[ReadableSpan]:
    """Three traces of two spans each, finished interleaved, as one batch holds them."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    roots = [tracer.start_span(f"GET /{n}", kind=SpanKind.SERVER) for n in range(3)]
    for n, root in enumerate(roots):
        with tracer.start_as_current_span(f"child {n}", context=set_span_in_context(root),
                                          attributes={"openinference.span.kind": "CHAIN",
                                                      "llm.token_count.total": 2**40}):
            pass
    for root in roots:
        root.end()
    return list(exporter.get_finished_spans())


def hex_trace_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.trace_id:032x}"


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_batch_becomes_one_record_per_trace_keyed_by_its_hex_id(
    encoding: SpanEncoding,
) -> None:
    spans = three_traces()
    records = records_for(spans, encoding)

    assert len(records) == 3
    for record in records:
        decoded = decode_otlp(record.value, encoding)
        assert decoded.invalid == 0
        assert set(decoded.spans_per_trace) == {record.key.decode()}, "one trace per record"
        assert decoded.spans_per_trace[record.key.decode()] == 2
    assert sorted(r.key.decode() for r in records) == sorted({hex_trace_id(s) for s in spans})


def test_a_trace_over_two_batches_is_two_records_with_one_key() -> None:
    spans = three_traces()
    first, second = records_for(spans[:3], "otlp_proto"), records_for(spans[3:], "otlp_proto")
    keys = [r.key for r in first] + [r.key for r in second]
    assert len(keys) == 6
    assert len(set(keys)) == 3


def test_otlp_json_is_the_collectors_json_not_protobufs() -> None:
    spans = three_traces()
    [record, *_] = records_for(spans, "otlp_json")
    document = json.loads(record.value)
    [span, *_] = [s for rs in document["resourceSpans"] for ss in rs["scopeSpans"]
                  for s in ss["spans"]]
    # Hex ids (protobuf's JSON would write base64), integer enums, 64-bit integers as strings.
    assert span["traceId"] == record.key.decode()
    assert len(span["spanId"]) == 16
    int(span["spanId"], 16)
    assert isinstance(span["kind"], int)
    assert isinstance(span["startTimeUnixNano"], str)
    proto = [r.value for r in records_for(spans, "otlp_proto") if r.key == record.key]
    assert TracesData.FromString(proto[0]).resource_spans, "the same trace in otlp_proto"
    assert decode_otlp(record.value, "otlp_json").kept == decode_otlp(proto[0], "otlp_proto").kept


def test_a_burst_beyond_the_sdks_default_queue_loses_no_span() -> None:
    # 2048 is the SDK's default queue: a demo emits thousands of spans in a second.
    route, exporter = to_records("otlp_proto", RESOURCE)
    tracer = route.tracer
    for n in range(6000):
        with tracer.start_as_current_span(f"span {n}"):
            pass
    route.flush()
    assert route.exporter.exported == route.spans_ended == 6000
    assert sum(len(TracesData.FromString(r.value).resource_spans[0].scope_spans[0].spans)
               for r in exporter.records) == 6000


class FailingExporter(SpanExporter):
    """A collector that is not there."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        pass


def test_spans_that_did_not_leave_are_an_error_not_a_short_demo() -> None:
    route = SpanRoute(FailingExporter(), RESOURCE)
    with route.tracer.start_as_current_span("lost"):
        pass
    with pytest.raises(RuntimeError, match="1 of 1 spans not exported"):
        route.flush()


def test_an_abandoned_route_exports_nothing_more_and_does_not_wait() -> None:
    class Recording(SpanExporter):
        def __init__(self) -> None:
            self.exported = 0
            self.down = False

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            if self.down:  # what the OTLP exporter does once shut down: fail, no retry
                return SpanExportResult.FAILURE
            self.exported += len(spans)
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            self.down = True

    recording = Recording()
    route = SpanRoute(recording, RESOURCE)
    with route.tracer.start_as_current_span("queued"):
        pass
    route.abandon()
    assert (recording.down, recording.exported) == (True, 0)
