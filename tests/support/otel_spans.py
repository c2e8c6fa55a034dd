"""Spans from the real OpenTelemetry SDK, encoded as the collector's Kafka exporter writes them.

``Recorder`` is a ``TracerProvider`` over an in-memory exporter; ``otlp_proto`` encodes finished
spans with the SDK's own OTLP encoder (``encode_spans``, what the OTLP exporters send and the
collector forwards); ``otlp_json`` (``scripts/span_transport.py``'s, re-exported) turns those
bytes into OTLP/JSON the way the collector's pdata JSON marshaler writes it. ``rag_trace``
emits the shape an instrumented RAG service emits: an HTTP server root without GenAI
content, an OpenInference chain, retriever and LLM span, and database spans around them.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from typing import Any

from openinference.semconv.trace import (
    DocumentAttributes,
    MessageAttributes,
    OpenInferenceSpanKindValues,
    SpanAttributes,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Tracer

from scripts.span_transport import encode
from scripts.span_transport import otlp_json as otlp_json  # the tests' too

KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
_ID_KEYS = ("traceId", "spanId", "parentSpanId")


class Recorder:
    """A real SDK tracer whose finished spans stay in memory."""

    def __init__(self, service: str = "rag-api", **resource: str) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": service, **resource}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer: Tracer = self.provider.get_tracer("tests.support.otel_spans")

    def spans(self) -> list[ReadableSpan]:
        """The spans finished so far, in end order, and forget them."""
        finished = list(self.exporter.get_finished_spans())
        self.exporter.clear()
        return finished


def otlp_proto(spans: Sequence[ReadableSpan]) -> bytes:
    """One record's value in ``otlp_proto``: the SDK's ``ExportTraceServiceRequest`` bytes."""
    return encode(spans, "otlp_proto")


def rewrite_ids(document: dict[str, Any], spell: Callable[[str], str]) -> dict[str, Any]:
    """An OTLP/JSON document with every hex id respelled (base64, upper case, ...), in place."""
    for node in _id_holders(document):
        for key in _ID_KEYS:
            if node.get(key):
                node[key] = spell(node[key])
    return document


def as_base64(hex_id: str) -> str:
    """A hex id in base64, as protobuf's canonical JSON writes bytes."""
    return base64.b64encode(bytes.fromhex(hex_id)).decode()


def rag_trace(tracer: Tracer, question: str = "Who wrote Dune?", http_spans: int = 2) -> None:
    """One request of an instrumented RAG service: HTTP root, chain, retriever, LLM, DB spans."""
    with tracer.start_as_current_span("POST /ask", kind=SpanKind.SERVER) as root:
        root.set_attributes({"http.request.method": "POST", "url.path": "/ask"})
        with tracer.start_as_current_span("query") as chain:
            chain.set_attributes({KIND: OpenInferenceSpanKindValues.CHAIN.value})
            chain.set_attribute(SpanAttributes.INPUT_VALUE, question)
            for n in range(http_spans):
                with tracer.start_as_current_span(f"SELECT docs {n}", kind=SpanKind.CLIENT) as db:
                    db.set_attributes({"db.system": "postgresql", "db.statement": "SELECT 1"})
            with tracer.start_as_current_span("retrieve") as retriever:
                prefix = f"{SpanAttributes.RETRIEVAL_DOCUMENTS}.0."
                retriever.set_attributes(
                    {
                        KIND: OpenInferenceSpanKindValues.RETRIEVER.value,
                        prefix + DocumentAttributes.DOCUMENT_ID: "doc-1",
                        prefix + DocumentAttributes.DOCUMENT_CONTENT: "Dune is by Frank Herbert.",
                        prefix + DocumentAttributes.DOCUMENT_SCORE: 0.9,
                    }
                )
            with tracer.start_as_current_span("chat") as llm:
                message = f"{SpanAttributes.LLM_OUTPUT_MESSAGES}.0."
                llm.set_attributes(
                    {
                        KIND: OpenInferenceSpanKindValues.LLM.value,
                        message + MessageAttributes.MESSAGE_ROLE: "assistant",
                        message + MessageAttributes.MESSAGE_CONTENT: "Frank Herbert [1].",
                        "llm.token_count.total": 42,
                    }
                )
            chain.set_attribute(SpanAttributes.OUTPUT_VALUE, "Frank Herbert [1].")


def _id_holders(document: dict[str, Any]) -> list[dict[str, Any]]:
    holders = []
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                holders += [span, *span.get("links", [])]
    return holders
