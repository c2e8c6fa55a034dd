"""Log records leaving the demo's service (scripts/log_transport.py): without a collector,
records as the collector's logs pipeline writes them with ``partition_logs_by_trace_id`` (one
trace per record, keyed by its hex trace id as its spans are, in either encoding, read back by
the worker's logs decoder); and records that did not leave are noticed, a burst included."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from opentelemetry.proto.logs.v1.logs_pb2 import LogsData
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    InMemoryLogRecordExporter,
    LogRecordExporter,
    LogRecordExportResult,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import set_span_in_context

from consumer.inputs.formats import FORMATS, SpanFormat
from scripts.log_transport import LogRoute, records_for, to_records
from scripts.span_transport import ENCODINGS, SpanEncoding

RESOURCE = Resource.create({"service.name": "rag-api"})


def three_traces_of_logs() -> tuple[list[ReadableLogRecord], list[str]]:
    """Two GenAI log records in each of three traces, emitted interleaved (as one batch holds
    them), and one ordinary log record outside any trace; the traces' hex ids."""
    exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger("opentelemetry.instrumentation.openai_v2")
    tracer = TracerProvider(resource=RESOURCE).get_tracer("test")
    chats = [tracer.start_span(f"chat {n}") for n in range(3)]
    for name in ("gen_ai.user.message", "gen_ai.choice"):
        for n, chat in enumerate(chats):
            logger.emit(event_name=name, context=set_span_in_context(chat),
                        attributes={"gen_ai.system": "openai"}, body={"content": f"{name} {n}"})
    logger.emit(body="service started")  # an ordinary log, of no trace
    for chat in chats:
        chat.end()
    provider.shutdown()
    return list(exporter.get_finished_logs()), [
        f"{chat.get_span_context().trace_id:032x}" for chat in chats]


def decoder(encoding: SpanEncoding) -> SpanFormat:
    fmt = FORMATS[encoding]
    assert isinstance(fmt, SpanFormat)
    return fmt


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_batch_becomes_one_record_per_trace_keyed_by_its_hex_id(
    encoding: SpanEncoding,
) -> None:
    logs, trace_ids = three_traces_of_logs()
    *keyed, loose = records_for(logs, encoding)
    decode = decoder(encoding).logs_decoder()

    assert [record.key.decode() for record in keyed] == trace_ids, "the spans' keys, in order"
    for record in keyed:
        decoded = decode(record.value)
        assert decoded.invalid == 0
        assert {event.trace_id for event in decoded.logs} == {record.key.decode()}
        assert [event.event.name for event in decoded.logs] == [
            "gen_ai.user.message", "gen_ai.choice"]
    # The log of no trace goes alone, with no trace's key; the worker drops it at decode.
    assert loose.key == b""
    dropped = decode(loose.value)
    assert (dropped.logs, dropped.logs_dropped) == ([], 1)


def test_otlp_json_is_the_collectors_json_with_hex_ids() -> None:
    logs, _ = three_traces_of_logs()
    [record, *_] = records_for(logs, "otlp_json")
    document = json.loads(record.value)
    [first, *_] = [log for rl in document["resourceLogs"] for sl in rl["scopeLogs"]
                   for log in sl["logRecords"]]
    # Hex ids (protobuf's JSON would write base64), 64-bit integers as strings.
    assert first["traceId"] == record.key.decode()
    assert len(first["spanId"]) == 16
    int(first["spanId"], 16)
    assert isinstance(first["observedTimeUnixNano"], str)
    proto = records_for(logs, "otlp_proto")[0].value
    assert LogsData.FromString(proto).resource_logs, "the same trace in otlp_proto"
    assert decoder("otlp_json").logs_decoder()(record.value).logs == (
        decoder("otlp_proto").logs_decoder()(proto).logs)


def test_a_burst_beyond_the_sdks_default_queue_loses_no_record() -> None:
    # 2048 is the SDK's default queue: the demo emits three records per request, 514 requests.
    route, exporter = to_records("otlp_proto", RESOURCE)
    logger = route.logger("test")
    tracer = TracerProvider(resource=RESOURCE).get_tracer("test")
    for n in range(3000):
        with tracer.start_as_current_span(f"chat {n}") as chat:
            logger.emit(event_name="gen_ai.choice", context=set_span_in_context(chat),
                        body={"index": 0})
    route.flush()
    assert route.exporter.exported == route.emitted == 3000
    assert len(exporter.records) == 3000


class FailingExporter(LogRecordExporter):
    """A collector that is not there."""

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        return LogRecordExportResult.FAILURE

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def test_log_records_that_did_not_leave_are_an_error_not_a_short_demo() -> None:
    route = LogRoute(FailingExporter(), RESOURCE)
    route.logger("test").emit(event_name="gen_ai.choice", body={"index": 0})
    with pytest.raises(RuntimeError, match="1 of 1 log records not exported"):
        route.flush()
