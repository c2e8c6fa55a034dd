"""Where an instrumented service's spans go, by the OTel SDK's own exporter and encoder.

Two ways, both behind the SDK's ``BatchSpanProcessor`` (spans leave in whole batches, as an
instrumented application sends them):

- ``to_collector``: OTLP over HTTP with the SDK's ``OTLPSpanExporter`` to an OpenTelemetry
  Collector (``scripts/otel-collector``), whose Kafka exporter writes the spans topic.
- ``to_records``: no collector at hand, so each batch becomes the records the collector's
  Kafka exporter would write with ``partition_traces_by_id: true``: one record per trace,
  keyed by its 32-hex trace id, in ``otlp_proto`` (the SDK's OTLP encoder: the very bytes an
  OTLP exporter sends) or ``otlp_json`` (as the collector's pdata marshaler writes it: hex
  ids, integer enums, 64-bit integers as strings). ``produce`` then writes them to Kafka.

Every span the service ended is counted, and so is every span an exporter took or failed:
``SpanRoute.flush`` says when some did not leave (a full queue drops spans silently).
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aiokafka import AIOKafkaProducer
from google.protobuf import json_format
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Tracer

SpanEncoding = Literal["otlp_proto", "otlp_json"]
ENCODINGS: tuple[SpanEncoding, ...] = ("otlp_proto", "otlp_json")
# The SDK drops spans once its queue is full (2048 by default): a burst of thousands of
# spans, as the demo emits, would lose some. A large bound keeps every one.
MAX_QUEUE_SIZE = 1_000_000
FLUSH_TIMEOUT_MS = 60_000
_ID_KEYS = ("traceId", "spanId", "parentSpanId")


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka record as the collector's Kafka exporter writes it."""

    key: bytes  # the 32-hex trace id
    value: bytes


class CountingExporter(SpanExporter):
    """An exporter that counts the spans it exported and those the one it wraps failed."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.failed = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Export through the wrapped exporter, counting the outcome."""
        result = self.inner.export(spans)
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.exported += len(spans)
            else:
                self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        """Shut the wrapped exporter down."""
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Flush the wrapped exporter."""
        return self.inner.force_flush(timeout_millis)


class KafkaRecordExporter(SpanExporter):
    """Each exported batch as the Kafka exporter's records, kept in order for ``produce``."""

    def __init__(self, encoding: SpanEncoding) -> None:
        self.encoding = encoding
        self.records: list[Record] = []
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Split the batch by trace and encode each trace as one record."""
        records = records_for(spans, self.encoding)
        with self._lock:
            self.records.extend(records)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release: the records stay readable."""


class _EndedSpans(SpanProcessor):
    """Counts the spans the service ended, to compare with what was exported."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self.count += 1

    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        """Nothing to do when a span starts."""


class SpanRoute:
    """A tracer provider whose batches go to one exporter, and what became of its spans."""

    def __init__(self, exporter: SpanExporter, resource: Resource) -> None:
        self.exporter = CountingExporter(exporter)
        self.provider = TracerProvider(resource=resource)
        self._ended = _EndedSpans()
        self.provider.add_span_processor(self._ended)
        self.provider.add_span_processor(
            BatchSpanProcessor(self.exporter, max_queue_size=MAX_QUEUE_SIZE)
        )

    @property
    def tracer(self) -> Tracer:
        """The service's tracer."""
        return self.provider.get_tracer("groundedness.scripts.rag_spans")

    @property
    def spans_ended(self) -> int:
        """Spans the service ended so far."""
        return self._ended.count

    def abandon(self) -> None:
        """Shut down without exporting what is queued (the run was interrupted): the exporter
        first, so that the processor's last flush fails at once instead of retrying."""
        self.exporter.shutdown()
        self.provider.shutdown()

    def flush(self) -> None:
        """Export every span ended so far and shut down; raises when some did not leave."""
        flushed = self.provider.force_flush(timeout_millis=FLUSH_TIMEOUT_MS)
        self.provider.shutdown()
        lost = self.spans_ended - self.exporter.exported
        if not flushed or lost:
            raise RuntimeError(
                f"{lost} of {self.spans_ended} spans not exported "
                f"({self.exporter.failed} failed; flushed: {flushed})"
            )


def to_collector(endpoint: str, resource: Resource) -> SpanRoute:
    """Spans over OTLP/HTTP to the collector at ``endpoint`` (http://host:port)."""
    return SpanRoute(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"), resource)


def to_records(encoding: SpanEncoding, resource: Resource) -> tuple[SpanRoute, KafkaRecordExporter]:
    """Spans as the Kafka exporter's records, kept in the returned exporter for ``produce``."""
    records = KafkaRecordExporter(encoding)
    return SpanRoute(records, resource), records


def records_for(spans: Sequence[ReadableSpan], encoding: SpanEncoding) -> list[Record]:
    """One batch as the Kafka exporter writes it with ``partition_traces_by_id``: a record per
    trace (in the order the traces first appear), keyed by its hex trace id."""
    traces: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        if span.context is None:
            continue
        traces.setdefault(format(span.context.trace_id, "032x"), []).append(span)
    return [Record(trace_id.encode(), encode(group, encoding))
            for trace_id, group in traces.items()]


def encode(spans: Sequence[ReadableSpan], encoding: SpanEncoding) -> bytes:
    """Spans as one record's value in ``encoding``."""
    proto = bytes(encode_spans(spans).SerializeToString())
    return proto if encoding == "otlp_proto" else otlp_json(proto)


def otlp_json(proto: bytes) -> bytes:
    """An ``otlp_proto`` value in ``otlp_json``, as the collector's pdata JSON marshaler writes
    it. ``MessageToDict`` gives lowerCamelCase keys, integer enums and 64-bit integers as
    strings, as pdata does; only the ids differ (protobuf writes base64, OTLP/JSON hex)."""
    # ExportTraceServiceRequest and TracesData share one wire format: resource_spans = 1.
    document: dict[str, Any] = json_format.MessageToDict(
        TracesData.FromString(proto), use_integers_for_enums=True
    )
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for node in (span, *span.get("links", [])):
                    for key in _ID_KEYS:
                        if node.get(key):
                            node[key] = base64.b64decode(node[key]).hex()
    return json.dumps(document).encode()


async def produce(bootstrap: str, topic: str, records: Sequence[Record]) -> None:
    """Write ``records`` to ``topic``, each acknowledged by every in-sync replica, as the
    exporter configured with ``required_acks: -1`` does."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        sent = [await producer.send(topic, record.value, key=record.key) for record in records]
        await asyncio.gather(*sent)  # raises the first record the broker refused
    finally:
        await producer.stop()
