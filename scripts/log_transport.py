"""Where an instrumented service's log records go, by the OTel SDK's own exporter and encoder:
the logs side of ``scripts/span_transport.py``, for the OTel GenAI instrumentation, which
writes a chat call's messages as log records of its span.

Two ways, both behind the SDK's ``BatchLogRecordProcessor``:

- ``to_collector``: OTLP over HTTP with the SDK's ``OTLPLogExporter`` to the collector, whose
  logs pipeline writes the logs topic (``partition_logs_by_trace_id: true``).
- ``to_records``: no collector at hand, so each batch becomes the records that pipeline's
  Kafka exporter would write: one record per trace, keyed by its 32-hex trace id (the spans'
  key, so both land on the same partition number), in ``otlp_proto`` (the SDK's OTLP encoder)
  or ``otlp_json`` (as the collector's pdata marshaler writes it: hex ids). ``produce`` of
  ``scripts/span_transport.py`` then writes them.

Every record the service emitted is counted, and so is every one an exporter took or failed:
``LogRoute.flush`` says when some did not leave.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format
from opentelemetry._logs import Logger
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.proto.logs.v1.logs_pb2 import LogsData
from opentelemetry.sdk._logs import (
    LoggerProvider,
    LogRecordProcessor,
    ReadableLogRecord,
    ReadWriteLogRecord,
)
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource

from scripts.span_transport import FLUSH_TIMEOUT_MS, MAX_QUEUE_SIZE, Record, SpanEncoding

_ID_KEYS = ("traceId", "spanId")


class CountingLogExporter(LogRecordExporter):
    """An exporter that counts the records it exported and those the one it wraps failed."""

    def __init__(self, inner: LogRecordExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.failed = 0
        self._lock = threading.Lock()

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        """Export through the wrapped exporter, counting the outcome."""
        result = self.inner.export(batch)
        with self._lock:
            if result is LogRecordExportResult.SUCCESS:
                self.exported += len(batch)
            else:
                self.failed += len(batch)
        return result

    def shutdown(self) -> None:
        """Shut the wrapped exporter down."""
        self.inner.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Flush the wrapped exporter."""
        return self.inner.force_flush(timeout_millis)


class KafkaLogRecordExporter(LogRecordExporter):
    """Each exported batch as the logs pipeline's records, kept in order for ``produce``."""

    def __init__(self, encoding: SpanEncoding) -> None:
        self.encoding = encoding
        self.records: list[Record] = []
        self._lock = threading.Lock()

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        """Split the batch by trace and encode each trace's records as one record."""
        records = records_for(batch, self.encoding)
        with self._lock:
            self.records.extend(records)
        return LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release: the records stay readable."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Nothing held: every batch is kept as it comes."""
        return True


class _EmittedLogs(LogRecordProcessor):
    """Counts the records the service emitted, to compare with what was exported."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        with self._lock:
            self.count += 1

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Nothing held."""
        return True


class LogRoute:
    """A logger provider whose batches go to one exporter, and what became of its records."""

    def __init__(self, exporter: LogRecordExporter, resource: Resource) -> None:
        self.exporter = CountingLogExporter(exporter)
        self.provider = LoggerProvider(resource=resource)
        self._emitted = _EmittedLogs()
        self.provider.add_log_record_processor(self._emitted)
        self.provider.add_log_record_processor(
            BatchLogRecordProcessor(self.exporter, max_queue_size=MAX_QUEUE_SIZE))

    def logger(self, scope: str) -> Logger:
        """The logger of an instrumentation scope (the instrumentation's module name)."""
        return self.provider.get_logger(scope)

    @property
    def emitted(self) -> int:
        """Records the service emitted so far."""
        return self._emitted.count

    def abandon(self) -> None:
        """Shut down without exporting what is queued (the run was interrupted)."""
        self.exporter.shutdown()
        self.provider.shutdown()

    def flush(self) -> None:
        """Export every record emitted so far and shut down; raises when some did not leave."""
        flushed = self.provider.force_flush(timeout_millis=FLUSH_TIMEOUT_MS)
        self.provider.shutdown()
        lost = self.emitted - self.exporter.exported
        if not flushed or lost:
            raise RuntimeError(
                f"{lost} of {self.emitted} log records not exported "
                f"({self.exporter.failed} failed; flushed: {flushed})")


def to_collector(endpoint: str, resource: Resource) -> LogRoute:
    """Log records over OTLP/HTTP to the collector at ``endpoint`` (http://host:port)."""
    return LogRoute(OTLPLogExporter(endpoint=f"{endpoint}/v1/logs"), resource)


def to_records(encoding: SpanEncoding, resource: Resource,
               ) -> tuple[LogRoute, KafkaLogRecordExporter]:
    """Log records as the logs pipeline's records, kept in the returned exporter."""
    records = KafkaLogRecordExporter(encoding)
    return LogRoute(records, resource), records


def records_for(batch: Sequence[ReadableLogRecord], encoding: SpanEncoding) -> list[Record]:
    """One batch as the Kafka exporter writes it with ``partition_logs_by_trace_id``: a record
    per trace (in the order the traces first appear), keyed by its hex trace id. A log record
    without a trace id goes alone, with an empty key (the exporter's is none: no trace's
    partition either way; the worker drops it)."""
    traces: dict[str, list[ReadableLogRecord]] = {}
    loose: list[Record] = []
    for readable in batch:
        trace_id = readable.log_record.trace_id or 0
        if trace_id:
            traces.setdefault(format(trace_id, "032x"), []).append(readable)
        else:
            loose.append(Record(b"", encode([readable], encoding)))
    keyed = [Record(trace.encode(), encode(group, encoding)) for trace, group in traces.items()]
    return keyed + loose


def encode(batch: Sequence[ReadableLogRecord], encoding: SpanEncoding) -> bytes:
    """Log records as one record's value in ``encoding``."""
    proto = bytes(encode_logs(batch).SerializeToString())
    return proto if encoding == "otlp_proto" else otlp_json(proto)


def otlp_json(proto: bytes) -> bytes:
    """An ``otlp_proto`` logs value in ``otlp_json``, as the collector's pdata JSON marshaler
    writes it: ``MessageToDict``'s keys, integer enums and 64-bit integers as strings, the
    ids in hex (protobuf writes base64)."""
    # ExportLogsServiceRequest and LogsData share one wire format: resource_logs = 1.
    document: dict[str, Any] = json_format.MessageToDict(
        LogsData.FromString(proto), use_integers_for_enums=True)
    for resource_logs in document.get("resourceLogs", []):
        for scope_logs in resource_logs.get("scopeLogs", []):
            for record in scope_logs.get("logRecords", []):
                for key in _ID_KEYS:
                    if record.get(key):
                        record[key] = base64.b64decode(record[key]).hex()
    return json.dumps(document).encode()
