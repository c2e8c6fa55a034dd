"""The span source of ``make demo FORMAT=otlp_proto|otlp_json``: the bundled sample as the
spans of an instrumented RAG service (``scripts/rag_spans.py``), on the spans topic.

Through the real OpenTelemetry Collector when it can run here (``scripts/otel-collector``,
built with Go once and cached): the SDK's OTLP/HTTP exporter -> the collector -> its Kafka
exporter (``partition_traces_by_id: true``). Without Go and without a cached collector, or
when it fails to build or start, the same batches are written directly as that exporter
writes them (``scripts/span_transport.py``). Either way the output says which it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from opentelemetry.trace import Tracer

from consumer.jsonl import read_labelled
from scripts import local_collector
from scripts.rag_spans import EmittedTraffic, emit_traffic, from_labelled, resource
from scripts.span_transport import SpanEncoding, produce, to_collector, to_records

Via = Literal["auto", "collector", "direct"]
VIAS: tuple[Via, ...] = ("auto", "collector", "direct")


@dataclass(frozen=True, slots=True)
class EmittedSample:
    """What the service emitted, how many spans, and which way they went."""

    traffic: EmittedTraffic
    spans: int
    way: str


def emit_sample(
    bootstrap: str, topic: str, encoding: SpanEncoding, via: Via, say: Callable[[str], None]
) -> EmittedSample:
    """Emit the whole sample onto ``topic`` (which must exist) in ``encoding``."""
    if via != "direct":
        reason = local_collector.unavailable_reason()
        if reason is None:
            try:
                return _through_collector(bootstrap, topic, encoding, say)
            except local_collector.CollectorFailed as failed:
                reason = str(failed)
        if via == "collector":
            raise SystemExit(f"no collector: {reason}")
        say(f"no collector ({reason.strip().splitlines()[-1]}): writing the records directly")
    return _direct(bootstrap, topic, encoding)


def _through_collector(
    bootstrap: str, topic: str, encoding: SpanEncoding, say: Callable[[str], None]
) -> EmittedSample:
    say("the OpenTelemetry Collector: scripts/otel-collector build (minutes the first time)")
    local_collector.build(show_progress=True)
    with local_collector.running(bootstrap, topic, encoding) as collector:
        route = to_collector(collector.endpoint, resource())
        try:
            traffic = _emit(route.tracer)
        except BaseException:  # Ctrl-C: no retries against the collector being stopped
            route.abandon()
            raise
        route.flush()
    # Stopped (SIGTERM): the collector's exporter has written everything it received.
    return EmittedSample(
        traffic, route.spans_ended,
        f"through the real collector: OTLP/HTTP -> OpenTelemetry Collector on "
        f"{collector.endpoint} -> its Kafka exporter",
    )


def _direct(bootstrap: str, topic: str, encoding: SpanEncoding) -> EmittedSample:
    route, exporter = to_records(encoding, resource())
    traffic = _emit(route.tracer)
    route.flush()
    asyncio.run(produce(bootstrap, topic, exporter.records))
    return EmittedSample(
        traffic, route.spans_ended,
        f"directly, no collector: {len(exporter.records)} records as the collector's Kafka "
        f"exporter writes them (one trace each, keyed by trace id)",
    )


def _emit(tracer: Tracer) -> EmittedTraffic:
    return emit_traffic(tracer, [from_labelled(row) for row in read_labelled()])
