"""A chat call as the OTel GenAI instrumentation records it in its default mode: a span without
content, and the messages as log records of that span (``gen_ai.system.message``,
``gen_ai.user.message``, ``gen_ai.choice``), emitted through the real OTel SDK's logs API and
encoded with its own OTLP encoder, as the collector's logs pipeline forwards them.

(``tests/integration/test_instrumentations.py`` runs the instrumentation itself; this is the
same shape, made here so tests choose what lands where and when.)
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.proto.logs.v1.logs_pb2 import LogsData
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, set_span_in_context

from tests.support.otel_spans import Recorder, otlp_proto

SYSTEM = "Answer from these documents only. Document doc-1: Dune is by Frank Herbert."


@dataclass(frozen=True)
class LoggedChat:
    """One request: its spans (HTTP root, chat span), its log records, and what they say."""

    trace_id: str
    chat_span_id: str
    question: str
    answer: str
    spans: list[ReadableSpan]
    logs: list[ReadableLogRecord]

    @property
    def key(self) -> bytes:
        """Both records' key: the hex trace id, as the collector partitions them."""
        return self.trace_id.encode()

    def spans_value(self) -> bytes:
        """The spans as one ``otlp_proto`` record."""
        return otlp_proto(self.spans)

    def logs_value(self, logs: Sequence[ReadableLogRecord] | None = None) -> bytes:
        """The log records (all, or ``logs``) as one ``otlp_proto`` record of the logs topic."""
        return logs_proto(self.logs if logs is None else logs)


class LoggedChats:
    """Makes ``LoggedChat``s with one SDK tracer and one SDK logger."""

    def __init__(self, service: str = "rag-api") -> None:
        self._spans = Recorder(service=service)
        self._exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
        self._logs = LoggerProvider(resource=Resource.create({"service.name": service}))
        self._logs.add_log_record_processor(SimpleLogRecordProcessor(self._exporter))
        self._logger = self._logs.get_logger("opentelemetry.instrumentation.openai_v2")

    def chat(self, question: str, answer: str, system: str = SYSTEM) -> LoggedChat:
        """One HTTP request whose chat call logs its messages and its choice."""
        tracer = self._spans.tracer
        with tracer.start_as_current_span("POST /ask", kind=SpanKind.SERVER), \
                tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT) as chat:
            chat.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.system": "openai",
                                 "gen_ai.request.model": "gpt-4o-mini"})
            context = set_span_in_context(chat)
            attributes = {"gen_ai.system": "openai"}
            self._logger.emit(event_name="gen_ai.system.message", context=context,
                              attributes=attributes, body={"content": system})
            self._logger.emit(event_name="gen_ai.user.message", context=context,
                              attributes=attributes, body={"content": question})
            self._logger.emit(event_name="gen_ai.choice", context=context,
                              attributes=attributes, body={
                                  "index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": answer}})
            span_context = chat.get_span_context()
        logs = list(self._exporter.get_finished_logs())
        self._exporter.clear()
        return LoggedChat(f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}",
                          question, answer, self._spans.spans(), logs)


def logs_proto(logs: Sequence[ReadableLogRecord]) -> bytes:
    """One record's value in ``otlp_proto``: the SDK's ``ExportLogsServiceRequest`` bytes."""
    return encode_logs(logs).SerializeToString()


def logs_json(proto: bytes) -> bytes:
    """An ``otlp_proto`` logs value in ``otlp_json``, as the collector's pdata JSON marshaler
    writes it (lowerCamelCase keys, integer enums, hex ids)."""
    document: dict[str, Any] = json_format.MessageToDict(
        LogsData.FromString(proto), use_integers_for_enums=True)
    for resource_logs in document.get("resourceLogs", []):
        for scope_logs in resource_logs.get("scopeLogs", []):
            for record in scope_logs.get("logRecords", []):
                for key in ("traceId", "spanId"):
                    if record.get(key):
                        record[key] = base64.b64decode(record[key]).hex()
    return json.dumps(document).encode()
