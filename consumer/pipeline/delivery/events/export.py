"""The events' way out: the OTel SDK's logs pipeline (``LoggerProvider``, its OTLP exporter)
behind a bounded queue that never makes the caller wait.

The SDK's own ``BatchLogRecordProcessor`` also drops when full, but silently; this processor
does the same job and counts every event that does not reach the exporter's endpoint in
``groundedness_verdict_events_dropped_total``: one that finds the queue full, one in a batch
the exporter could not send (the endpoint down, slow past ``OTEL_EXPORTER_OTLP_TIMEOUT``, or
refusing), one still queued or in a request still waiting when ``close`` runs out of time.
One thread exports, a batch at a time, whatever is queued; a down endpoint only fills the
queue, never slows judging.

The exporter is OTLP over HTTP (protobuf), configured by the SDK itself from the standard
``OTEL_EXPORTER_OTLP_*`` variables; the resource from ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` (service ``groundedness-worker`` when neither names one).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

import structlog
from opentelemetry.sdk._logs import (
    LoggerProvider,
    LogRecordProcessor,
    ReadableLogRecord,
    ReadWriteLogRecord,
)
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import SERVICE_NAME, Resource

log = structlog.get_logger(__name__)

MAX_QUEUE = 2048  # the SDK's default for its batch processor (OTEL_BLRP_MAX_QUEUE_SIZE)
MAX_BATCH = 512  # and its largest export
DEFAULT_SERVICE_NAME = "groundedness-worker"
SHUTDOWN_GRACE_S = 1.0  # close's wait for the batch in flight once the exporter is shut

Dropped = Callable[[int], None]


class BoundedExport(LogRecordProcessor):
    """A log record processor that queues at most ``max_queue`` records and exports them on
    a thread of its own; ``dropped(n)`` hears of every record that will never be sent."""

    def __init__(self, exporter: LogRecordExporter, dropped: Dropped, *,
                 max_queue: int = MAX_QUEUE, max_batch: int = MAX_BATCH) -> None:
        self._exporter = exporter
        self._dropped = dropped
        self._max_batch = max_batch
        self._queue: queue.Queue[ReadableLogRecord] = queue.Queue(max_queue)
        self._closing = threading.Event()
        # The batch the exporter holds, for ``close`` to count if its request outlives it;
        # ``_abandoned`` then tells the export, should it return later, not to count it again.
        self._lock = threading.Lock()
        self._in_flight = 0
        self._abandoned = False
        self._thread = threading.Thread(target=self._run, name="verdict-events", daemon=True)
        self._thread.start()

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        """Queue the record, or count it dropped: never blocks."""
        if self._closing.is_set():
            self._dropped(1)
            return
        readable = ReadableLogRecord(
            log_record=log_record.log_record,
            resource=log_record.resource or Resource.get_empty(),
            instrumentation_scope=log_record.instrumentation_scope,
            limits=log_record.limits,
        )
        try:
            self._queue.put_nowait(readable)
        except queue.Full:
            self._dropped(1)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait until every queued record has been exported (or dropped); False on timeout."""
        deadline = time.monotonic() + timeout_millis / 1000
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._queue.all_tasks_done.wait(remaining)
        return True

    def shutdown(self) -> None:
        """``close`` with the SDK's default bound."""
        self.close(30.0)

    def close(self, timeout_s: float) -> None:
        """Export what is queued for up to ``timeout_s``, then give up: the exporter is shut
        (ending its retries) and whatever is left is counted dropped: queued, or in a request
        still waiting on its timeout. Blocks for at most ``timeout_s + SHUTDOWN_GRACE_S``;
        idempotent."""
        if self._closing.is_set():
            return
        self._closing.set()
        self._thread.join(timeout_s)
        self._exporter.shutdown()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated
        # Shut, the exporter abandons its retries: the batch it held fails (and is counted)
        # at once, unless a request is still waiting on its timeout (the thread is a daemon).
        self._thread.join(SHUTDOWN_GRACE_S)
        left = self._abandon() + self._discard()
        if left:
            log.warning("verdict_events_unsent", dropped=left, timeout_s=timeout_s)

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch:
                self._export(batch)
            elif self._closing.is_set():
                return

    def _take(self) -> list[ReadableLogRecord]:
        try:
            batch = [self._queue.get(timeout=0.2)]  # the wait lets a close be noticed
        except queue.Empty:
            return []
        while len(batch) < self._max_batch:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _export(self, batch: list[ReadableLogRecord]) -> None:
        with self._lock:
            self._in_flight, self._abandoned = len(batch), False
        try:
            sent = self._exporter.export(batch) is LogRecordExportResult.SUCCESS
        except Exception:  # an exporter bug must not end the thread: these events are lost
            log.exception("verdict_events_export_failed")
            sent = False
        with self._lock:
            counted, self._in_flight, self._abandoned = self._abandoned, 0, False
        if not sent and not counted:
            self._dropped(len(batch))
        for _ in batch:
            self._queue.task_done()

    def _abandon(self) -> int:
        """Count the batch of a request still waiting (the thread outlived the grace) as
        dropped, now: the process may end before it returns. Returns its size."""
        with self._lock:
            if not self._thread.is_alive() or not self._in_flight:
                return 0
            self._abandoned = True
            abandoned, self._in_flight = self._in_flight, 0
        self._dropped(abandoned)
        return abandoned

    def _discard(self) -> int:
        left = 0
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
            self._queue.task_done()
            left += 1
        if left:
            self._dropped(left)
        return left


def logger_provider(processor: LogRecordProcessor) -> LoggerProvider:
    """A provider of the environment's resource that sends every record to ``processor``;
    closed by its owner, not at interpreter exit."""
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_log_record_processor(processor)
    return provider
