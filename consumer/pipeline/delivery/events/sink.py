"""One event per verdict, emitted once the verdict topic has the verdict.

At least once, ``EventingSink`` wraps the worker's ``VerdictSink``: a verdict's event is
emitted when its ``publish`` returns, the broker having acknowledged it. A publish that fails
emits nothing; its retry, once acknowledged, emits the one event. Exactly once, ``publish``
only holds the verdict for its partition's transaction, which may yet be discarded: the
events are emitted from ``TransactionalSink.on_committed`` instead, once the transaction
commits, so a verdict that never commits has no event. Emitting only queues
(``export.BoundedExport``): it never delays the acknowledgement the pipeline waits for, nor
the commit after it.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import structlog
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

from consumer.ops import metrics
from consumer.pipeline.delivery.events.attributes import (
    EVENT_NAME,
    event_attributes,
    event_context,
    event_time_ns,
)
from consumer.pipeline.delivery.events.export import BoundedExport, logger_provider
from consumer.pipeline.delivery.sink import Record, VerdictSink
from consumer.pipeline.delivery.transactional import TransactionalSink
from schemas.verdict import VerdictEvent

log = structlog.get_logger(__name__)

# What a SIGTERM leaves the events after the drain: well inside the chart's grace period.
CLOSE_TIMEOUT_S = 5.0
SCOPE = "groundedness-worker"


class Emitter(Protocol):
    """Emits a verdict's event without waiting."""

    def emit(self, verdict: VerdictEvent) -> None: ...


class VerdictEvents:
    """``gen_ai.evaluation.result`` events through the SDK's logs pipeline: a ``Logger`` of
    a provider whose one processor is the bounded export."""

    def __init__(self, export: BoundedExport) -> None:
        self._export = export
        self._provider = logger_provider(export)
        self._logger = self._provider.get_logger(SCOPE)

    def emit(self, verdict: VerdictEvent) -> None:
        """Queue the verdict's event; a failure to build it is counted as a drop."""
        try:
            self._logger.emit(event_name=EVENT_NAME, timestamp=event_time_ns(verdict),
                              context=event_context(verdict),
                              attributes=event_attributes(verdict))
        except Exception:  # best effort: never the verdict's way
            log.exception("verdict_event_failed", verdict_id=verdict.verdict_id)
            metrics.VERDICT_EVENTS_DROPPED.inc()

    def flush(self, timeout_s: float) -> bool:
        """Wait (blocking) until every queued event is sent or dropped; False on timeout."""
        return self._export.force_flush(int(timeout_s * 1000))

    async def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Send what is queued for up to ``timeout_s`` (off the event loop), then stop."""
        await asyncio.to_thread(self._export.close, timeout_s)


def otlp_events() -> VerdictEvents:
    """Events to the OTLP/HTTP endpoint the standard ``OTEL_EXPORTER_OTLP_*`` variables name
    (read by the SDK's exporter), drops counted in ``groundedness_verdict_events_dropped``."""
    return VerdictEvents(BoundedExport(OTLPLogExporter(), metrics.VERDICT_EVENTS_DROPPED.inc))


class EventingSink:
    """A ``VerdictSink`` that emits each verdict's event once it is on the verdicts topic:
    when ``sink.publish`` returns (acknowledged), or, for a ``TransactionalSink``, whose
    ``publish`` only holds it, when its transaction commits."""

    def __init__(self, sink: VerdictSink, events: Emitter) -> None:
        self._sink = sink
        self._events = events
        self._on_commit = isinstance(sink, TransactionalSink)
        self.holds_until_commit = self._on_commit
        if isinstance(sink, TransactionalSink):
            sink.on_committed = events.emit

    async def publish(self, verdict: VerdictEvent) -> None:
        """Publish as ``sink`` does; then, only if that returned with the verdict on its
        topic, emit the event (a held one's is emitted by its commit)."""
        await self._sink.publish(verdict)
        if not self._on_commit:
            self._events.emit(verdict)

    async def dead_letter(self, record: Record, reason: str) -> None:
        """Dead-letter as ``sink`` does: a record without a trace has no event."""
        await self._sink.dead_letter(record, reason)
