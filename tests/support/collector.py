"""The real OpenTelemetry Collector in tests (run by ``scripts/local_collector.py``): traces
sent to it with the OTel Python SDK as an instrumented RAG application sends them, and its
topic read back; and the same binary with a logs pipeline (``running_logs``), whose topic
holds what the worker's verdict events (``VERDICT_EVENTS=otlp``) became."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord
from openinference.semconv.trace import (
    DocumentAttributes,
    MessageAttributes,
    OpenInferenceSpanKindValues,
    SpanAttributes,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, LogsData
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from scripts import local_collector

SERVICE_NAME = "rag-app-under-test"
KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
DOCS = SpanAttributes.RETRIEVAL_DOCUMENTS
QUESTION = "When was the Eiffel Tower completed?"
ANSWER = "The Eiffel Tower was completed in 1889."


def available() -> None:
    """Skip the calling test where the collector can be neither built nor found cached; else
    build it (or find it cached) before any test's clock starts."""
    reason = local_collector.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    local_collector.build()


# ---------------------------------------------------------------------------- sending


def emit_rag_traces(traces_url: str) -> list[ReadableSpan]:
    """Two traces through the SDK's batch processor and OTLP/HTTP exporter; the finished
    spans as the SDK recorded them (a second, in-memory processor keeps them)."""
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url)))
    tracer = provider.get_tracer("groundedness.tests.collector")

    with tracer.start_as_current_span("POST /chat", kind=SpanKind.SERVER, attributes={
        "http.request.method": "POST", "url.path": "/chat", "http.response.status_code": 200,
    }), tracer.start_as_current_span("RAG pipeline", attributes={
        KIND: OpenInferenceSpanKindValues.CHAIN.value,
        SpanAttributes.INPUT_VALUE: QUESTION, SpanAttributes.OUTPUT_VALUE: ANSWER,
    }):
        with tracer.start_as_current_span(
            "retrieve", attributes=_retriever_attributes()
        ), tracer.start_as_current_span(
            "SELECT documents", kind=SpanKind.CLIENT, attributes={"db.system.name": "postgresql"}
        ):
            pass
        with tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT,
                                          attributes=_llm_attributes(QUESTION, ANSWER)):
            pass
    with tracer.start_as_current_span("agent", attributes={
        KIND: OpenInferenceSpanKindValues.AGENT.value,
        SpanAttributes.INPUT_VALUE: "Who designed it?",
        SpanAttributes.OUTPUT_VALUE: "Gustave Eiffel's company.",
    }), tracer.start_as_current_span(
        "llm", attributes=_llm_attributes("Who designed it?", "Gustave Eiffel's company.")
    ):
        pass

    assert provider.force_flush(timeout_millis=30_000), "the OTLP exporter did not flush"
    provider.shutdown()
    return list(memory.get_finished_spans())


def _retriever_attributes() -> dict[str, Any]:
    attributes: dict[str, Any] = {
        KIND: OpenInferenceSpanKindValues.RETRIEVER.value, SpanAttributes.INPUT_VALUE: QUESTION,
    }
    documents = [("doc-1", "Completed in 1889 for the World's Fair.", 0.91),
                 ("doc-2", "The tower is 330 metres tall.", 0.42)]
    for i, (doc_id, content, score) in enumerate(documents):
        attributes[f"{DOCS}.{i}.{DocumentAttributes.DOCUMENT_ID}"] = doc_id
        attributes[f"{DOCS}.{i}.{DocumentAttributes.DOCUMENT_CONTENT}"] = content
        attributes[f"{DOCS}.{i}.{DocumentAttributes.DOCUMENT_SCORE}"] = score
    return attributes


def _llm_attributes(question: str, answer: str) -> dict[str, Any]:
    inputs, outputs = SpanAttributes.LLM_INPUT_MESSAGES, SpanAttributes.LLM_OUTPUT_MESSAGES
    role, content = MessageAttributes.MESSAGE_ROLE, MessageAttributes.MESSAGE_CONTENT
    return {
        KIND: OpenInferenceSpanKindValues.LLM.value,
        SpanAttributes.LLM_MODEL_NAME: "gpt-4o-mini",
        SpanAttributes.LLM_TOKEN_COUNT_PROMPT: 812,
        f"{inputs}.0.{role}": "system", f"{inputs}.0.{content}": "Answer from the context.",
        f"{inputs}.1.{role}": "user", f"{inputs}.1.{content}": question,
        f"{outputs}.0.{role}": "assistant", f"{outputs}.0.{content}": answer,
        SpanAttributes.OUTPUT_VALUE: answer,
        "tags": ("rag", "test"),  # an array attribute
        "cached": False,
    }


# ---------------------------------------------------------------------------- reading


async def read_spans(
    bootstrap: str, topic: str, *, expected: int, timeout_s: float = 60.0
) -> list[ConsumerRecord[bytes, bytes]]:
    """Records of ``topic`` from the start until they hold ``expected`` spans."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    records: list[ConsumerRecord[bytes, bytes]] = []
    try:
        deadline = time.monotonic() + timeout_s
        while _span_count(records) < expected and time.monotonic() < deadline:
            for part in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(part)
    finally:
        await consumer.stop()
    assert _span_count(records) == expected, f"{_span_count(records)} of {expected} spans"
    return records


def _span_count(records: list[ConsumerRecord[bytes, bytes]]) -> int:
    # Both encodings spell the spans list "spans" in JSON; counting only needs a rough look.
    count = 0
    for record in records:
        value = record.value or b""
        if value.startswith(b"{"):
            count += sum(len(ss["spans"]) for rs in json.loads(value)["resourceSpans"]
                         for ss in rs["scopeSpans"])
        else:
            count += sum(len(ss.spans) for rs in TracesData.FromString(value).resource_spans
                         for ss in rs.scope_spans)
    return count


# ---------------------------------------------------------------------------- logs


@dataclass(frozen=True, slots=True)
class LogsCollector:
    """A started collector whose logs pipeline writes OTLP/HTTP logs to ``topic``."""

    endpoint: str  # http://127.0.0.1:PORT, as OTEL_EXPORTER_OTLP_ENDPOINT wants it
    topic: str


def logs_config(port: int, bootstrap: str, topic: str) -> dict[str, Any]:
    """The collector's configuration for logs: OTLP/HTTP in, batched, to Kafka in
    ``otlp_proto``, acknowledged by every in-sync replica."""
    return {
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{port}"}}}},
        "processors": {"batch": {"timeout": "200ms"}},
        "exporters": {"kafka": {
            "brokers": bootstrap.split(","),
            "logs": {"topic": topic, "encoding": "otlp_proto"},
            "producer": {"required_acks": -1},
        }},
        "service": {
            # No internal metrics server: it would take port 8888 from another collector.
            "telemetry": {"metrics": {"level": "none"}},
            "pipelines": {"logs": {"receivers": ["otlp"], "processors": ["batch"],
                                   "exporters": ["kafka"]}},
        },
    }


@contextmanager
def running_logs(bootstrap: str, topic: str, run_dir: Path) -> Iterator[LogsCollector]:
    """The repo's collector binary (``scripts/otel-collector build``) run with a logs pipeline
    of its own, beside the script's traces configuration; stopped with SIGTERM on exit (its
    exporter flushes to Kafka first). Its log is ``run_dir / "otelcol.log"``."""
    port = local_collector.free_port()
    with running_config(logs_config(port, bootstrap, topic), port, run_dir) as endpoint:
        yield LogsCollector(endpoint, topic)


@contextmanager
def running_config(config: dict[str, Any], port: int, run_dir: Path) -> Iterator[str]:
    """The repo's collector binary run with ``config`` (its OTLP/HTTP receiver on ``port``)
    until exit, then stopped with SIGTERM (its exporter flushes to Kafka first); yields the
    endpoint, ``http://127.0.0.1:PORT``. Its log is ``run_dir / "otelcol.log"``."""
    binary = local_collector.build()
    path = run_dir / "otelcol.json"  # JSON is YAML: the collector reads it as a file
    path.write_text(json.dumps(config), encoding="utf-8")
    log_path = run_dir / "otelcol.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [str(binary), "--config", f"file:{path}"], stdout=log_file, stderr=log_file)
    try:
        _wait_listening(process, port, log_path)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(local_collector.STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_listening(process: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
    deadline = time.monotonic() + local_collector.START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise local_collector.CollectorFailed(
                f"the collector exited at start:\n{log_path.read_text(errors='replace')}")
        if b"Everything is ready" in log_path.read_bytes():
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                return
        time.sleep(0.1)
    raise local_collector.CollectorFailed(
        f"the collector did not listen on {port}:\n{log_path.read_text(errors='replace')}")


async def read_logs(bootstrap: str, topic: str, *, expected: int,
                    timeout_s: float = 60.0) -> list[LogRecord]:
    """The log records of ``topic`` from the start, once there are ``expected`` of them."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    found: list[LogRecord] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(found) < expected and time.monotonic() < deadline:
            for part in (await consumer.getmany(timeout_ms=200)).values():
                for record in part:
                    data = LogsData.FromString(record.value or b"")
                    found.extend(log for rl in data.resource_logs for sl in rl.scope_logs
                                 for log in sl.log_records)
    finally:
        await consumer.stop()
    return found
