"""What every program shares: its command line, and the OTel SDK set up as a team sets it up,
traces and logs each through a batch processor and the OTLP/HTTP exporter.

Imports the OTel SDK only, so it runs (and type-checks) in both venvs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry._logs import set_logger_provider
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

from tests.instrumentations.cases import CASES, Case, report

FLUSH_TIMEOUT_MS = 30_000


@dataclass(frozen=True, slots=True)
class Arguments:
    """Where the model is (an OpenAI base URL) and where the telemetry goes."""

    model_url: str  # http://127.0.0.1:PORT/v1
    otlp_endpoint: str  # http://127.0.0.1:PORT, as OTEL_EXPORTER_OTLP_ENDPOINT has it
    service: str


def arguments(description: str) -> Arguments:
    """The program's command line."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model-url", required=True)
    parser.add_argument("--otlp-endpoint", required=True)
    parser.add_argument("--service", required=True, help="the resource's service.name")
    parsed = parser.parse_args()
    return Arguments(parsed.model_url, parsed.otlp_endpoint.rstrip("/"), parsed.service)


@dataclass(frozen=True, slots=True)
class Telemetry:
    """The program's providers, also set as the global ones."""

    tracer_provider: TracerProvider
    logger_provider: LoggerProvider

    def shutdown(self) -> None:
        """Flush both exporters (raise unless every batch reached the endpoint), then stop."""
        spans = self.tracer_provider.force_flush(FLUSH_TIMEOUT_MS)
        logs = self.logger_provider.force_flush(FLUSH_TIMEOUT_MS)
        self.tracer_provider.shutdown()
        self.logger_provider.shutdown()
        if not (spans and logs):
            raise SystemExit(f"telemetry not flushed (spans {spans}, logs {logs})")


def start(args: Arguments) -> Telemetry:
    """Providers exporting to ``args.otlp_endpoint`` (``/v1/traces``, ``/v1/logs``)."""
    resource = Resource.create({"service.name": args.service})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{args.otlp_endpoint}/v1/traces")))
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(OTLPLogExporter(endpoint=f"{args.otlp_endpoint}/v1/logs")))
    trace.set_tracer_provider(tracer_provider)
    set_logger_provider(logger_provider)
    return Telemetry(tracer_provider, logger_provider)


@contextmanager
def request_span(telemetry: Telemetry, question: str) -> Iterator[str]:
    """The web handler's server span around one question (the trace's root, no GenAI content);
    yields the trace id, 32 hex."""
    tracer = telemetry.tracer_provider.get_tracer("rag.web")
    with tracer.start_as_current_span("POST /ask", kind=SpanKind.SERVER, attributes={
        "http.request.method": "POST", "url.path": "/ask", "http.response.status_code": 200,
    }) as span:
        span.set_attribute("app.question.length", len(question))
        yield format(span.get_span_context().trace_id, "032x")


def ask_each(telemetry: Telemetry, answer: Callable[[Case], str]) -> None:
    """Every case's question, answered by ``answer`` inside its web request's span; a report
    line per case on stdout, which the test reads."""
    for case in CASES:
        with request_span(telemetry, case.question) as trace_id:
            reply = answer(case)
        print(report(case, trace_id, reply), flush=True)
