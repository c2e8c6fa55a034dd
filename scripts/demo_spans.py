"""The span source of ``make demo FORMAT=otlp_proto|otlp_json``: the bundled sample as the
telemetry of an instrumented RAG service, on the spans topic (and the logs topic).

Two instrumentations (``INSTRUMENTATION=...``):

- ``openinference`` (the default): OpenInference's LlamaIndex instrumentation, the content on
  the spans (``scripts/rag_spans.py``).
- ``openai-v2``: the OTel GenAI instrumentation in its default capture mode, spans without
  content and the messages as log records of the chat span (``scripts/openai_v2_spans.py``),
  which go to the logs topic (the worker reads it with ``OTLP_LOGS_TOPIC``).

Through the real OpenTelemetry Collector when it can run here (``scripts/otel-collector``,
built with Go once and cached): the SDK's OTLP/HTTP exporters -> the collector -> its Kafka
exporter (``partition_traces_by_id: true``, ``partition_logs_by_trace_id: true``). Without Go
and without a cached collector, or when it fails to build or start, the same batches are
written directly as that exporter writes them (``scripts/span_transport.py``,
``scripts/log_transport.py``). Either way the output says which it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from consumer.jsonl import read_labelled
from scripts import local_collector, log_transport, span_transport
from scripts.log_transport import LogRoute
from scripts.openai_v2_spans import INSTRUMENTATION_SCOPE, OpenAIv2Service
from scripts.rag_spans import EmittedTraffic, emit_traffic, from_labelled, resource
from scripts.span_transport import SpanEncoding, SpanRoute, produce

Via = Literal["auto", "collector", "direct"]
VIAS: tuple[Via, ...] = ("auto", "collector", "direct")
Instrumentation = Literal["openinference", "openai-v2"]
INSTRUMENTATIONS: tuple[Instrumentation, ...] = ("openinference", "openai-v2")


@dataclass(frozen=True, slots=True)
class EmittedSample:
    """What the service emitted, how many spans and log records, and which way they went."""

    traffic: EmittedTraffic
    spans: int
    way: str
    logs: int = 0


@dataclass(frozen=True, slots=True)
class _Routes:
    """The service's spans and (with ``openai-v2``) its log records, on their ways out."""

    spans: SpanRoute
    logs: LogRoute | None

    def emit(self) -> EmittedTraffic:
        rows = [from_labelled(row) for row in read_labelled()]
        if self.logs is None:
            return emit_traffic(self.spans.tracer, rows)
        service = OpenAIv2Service(self.logs.logger(INSTRUMENTATION_SCOPE))
        return service.emit_traffic(self.spans.tracer, rows)

    def flush(self) -> None:
        self.spans.flush()
        if self.logs is not None:
            self.logs.flush()

    def abandon(self) -> None:
        self.spans.abandon()
        if self.logs is not None:
            self.logs.abandon()

    def sample(self, traffic: EmittedTraffic, way: str) -> EmittedSample:
        logs = self.logs.emitted if self.logs is not None else 0
        return EmittedSample(traffic, self.spans.spans_ended, way, logs)


def emit_sample(
    bootstrap: str, topic: str, encoding: SpanEncoding, via: Via, say: Callable[[str], None],
    *, instrumentation: Instrumentation = "openinference", logs_topic: str | None = None,
) -> EmittedSample:
    """Emit the whole sample in ``encoding``, traced as ``instrumentation`` traces it: the
    spans onto ``topic``, the log records (``openai-v2`` only) onto ``logs_topic``; both
    topics must exist."""
    if (instrumentation == "openai-v2") != (logs_topic is not None):
        raise ValueError(f"{instrumentation}: a logs topic goes with openai-v2 (its content is "
                         "in log records), and only with it")
    where = _Topics(topic, logs_topic)
    if via != "direct":
        reason = local_collector.unavailable_reason()
        if reason is None:
            try:
                return _through_collector(bootstrap, where, encoding, say)
            except local_collector.CollectorFailed as failed:
                reason = str(failed)
        if via == "collector":
            raise SystemExit(f"no collector: {reason}")
        say(f"no collector ({reason.strip().splitlines()[-1]}): writing the records directly")
    return _direct(bootstrap, where, encoding)


@dataclass(frozen=True, slots=True)
class _Topics:
    spans: str
    logs: str | None


def _through_collector(
    bootstrap: str, topics: _Topics, encoding: SpanEncoding, say: Callable[[str], None]
) -> EmittedSample:
    say("the OpenTelemetry Collector: scripts/otel-collector build (minutes the first time)")
    local_collector.build(show_progress=True)
    logs_topic = topics.logs or local_collector.DEFAULT_LOGS_TOPIC
    with local_collector.running(bootstrap, topics.spans, encoding, logs_topic) as collector:
        routes = _Routes(
            span_transport.to_collector(collector.endpoint, resource()),
            log_transport.to_collector(collector.endpoint, resource()) if topics.logs else None)
        try:
            traffic = routes.emit()
        except BaseException:  # Ctrl-C: no retries against the collector being stopped
            routes.abandon()
            raise
        routes.flush()
    # Stopped (SIGTERM): the collector's exporter has written everything it received.
    return routes.sample(traffic, f"through the real collector: OTLP/HTTP -> OpenTelemetry "
                                  f"Collector on {collector.endpoint} -> its Kafka exporter")


def _direct(bootstrap: str, topics: _Topics, encoding: SpanEncoding) -> EmittedSample:
    spans, span_records = span_transport.to_records(encoding, resource())
    logs, log_records = (log_transport.to_records(encoding, resource()) if topics.logs
                         else (None, None))
    routes = _Routes(spans, logs)
    traffic = routes.emit()
    routes.flush()
    asyncio.run(produce(bootstrap, topics.spans, span_records.records))
    way = (f"directly, no collector: {len(span_records.records)} records as the collector's "
           f"Kafka exporter writes them (one trace each, keyed by trace id)")
    if topics.logs is not None and log_records is not None:
        asyncio.run(produce(bootstrap, topics.logs, log_records.records))
        way += f", and {len(log_records.records)} of log records alike"
    return routes.sample(traffic, way)
