"""One Kafka record of OTLP log records -> the GenAI log events it carries (pure).

The collector's logs pipeline writes a ``LogsData`` per record (kafkaexporter ``logs``; with
``partition_logs_by_trace_id: true`` keyed by trace id, as the spans are). Most of its records
are a service's ordinary logs. The ones kept are the OTel GenAI events, whose name (the
record's ``event_name``, or the ``event.name`` attribute older SDKs write) starts with
``gen_ai.``, and that name a valid trace id: without one a record cannot join its trace. The
rest are dropped and counted (``logs_dropped``; ``groundedness_log_records_total``), as
non-GenAI spans are; a record counts for its trace's activity only when it is kept.

Each kept record becomes a ``LogEvent``, which assembly joins to its span
(``telemetry/log_events.py``): its attributes, with its body under ``gen_ai.event.content``.

As with spans, one record that cannot be read (a JSON field that does not parse) is left out
alone and counted as unreadable; ``DecodeError`` (the dead-letter topic) is for a Kafka record
that is no ``LogsData`` at all.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError as ProtobufDecodeError
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, LogsData

from consumer.errors import DecodeError
from consumer.inputs import OtlpEncoding
from consumer.inputs.otlp.json_spans import PARSE_ERRORS, bad_field, id_bytes, one_line
from consumer.inputs.otlp.span_filter import SPAN_ID_BYTES, TRACE_ID_BYTES, ZERO_SPAN_ID
from consumer.inputs.otlp.values import MAX_ATTRIBUTE_CHARS, Cuts, any_value, attributes
from consumer.telemetry.spans import DecodedRecord, LogEvent, SpanEvent

GENAI_EVENT_PREFIX = "gen_ai."
EVENT_NAME = "event.name"  # the attribute SDKs wrote before LogRecord had ``event_name``
EVENT_CONTENT = "gen_ai.event.content"  # where a span event of these conventions keeps its body
_ZERO_TRACE_ID = bytes(TRACE_ID_BYTES)
NO_TRACE_ID = "a GenAI log record without a valid trace id"
# GenAI records read per Kafka record: a collector batch holds hundreds; a hostile record of
# 100,000 would hold the event loop for seconds (about 50 us each). The rest are counted.
MAX_GENAI_RECORDS = 10_000
TOO_MANY = f"more than {MAX_GENAI_RECORDS:,} GenAI log records in one record: the rest left out"


def decode_otlp_logs(value: bytes, encoding: OtlpEncoding) -> DecodedRecord:
    """A logs record's value -> its GenAI log events; ``DecodeError`` when it is no
    ``LogsData``."""
    decoded, cuts = DecodedRecord(), Cuts()
    per_trace: Counter[str] = Counter()
    for record in _records(value, encoding, decoded):
        name = record.event_name or _event_name_attribute(record)
        if not name.startswith(GENAI_EVENT_PREFIX):
            decoded.logs_dropped += 1
            continue
        if len(decoded.logs) >= MAX_GENAI_RECORDS:
            decoded.logs_dropped += 1
            decoded.problem = decoded.problem or TOO_MANY
            continue
        trace_id, span_id = record.trace_id, record.span_id
        if len(trace_id) != TRACE_ID_BYTES or trace_id == _ZERO_TRACE_ID:
            decoded.logs_dropped += 1
            decoded.invalid += 1
            decoded.problem = decoded.problem or NO_TRACE_ID
            continue
        event = SpanEvent(name[:MAX_ATTRIBUTE_CHARS], record.time_unix_nano
                          or record.observed_time_unix_nano, _attributes(record, cuts))
        trace = trace_id.hex()
        named = len(span_id) == SPAN_ID_BYTES and span_id != ZERO_SPAN_ID
        decoded.logs.append(LogEvent(trace, span_id.hex() if named else None, event))
        per_trace[trace] += 1
    decoded.spans_per_trace = dict(per_trace)
    decoded.cut_values = cuts.count
    return decoded


def _records(value: bytes, encoding: OtlpEncoding, decoded: DecodedRecord) -> list[LogRecord]:
    if encoding == "otlp_proto":
        data = LogsData()
        try:
            data.ParseFromString(value)
        except ProtobufDecodeError as e:
            raise DecodeError(f"otlp_proto record is no LogsData: {one_line(e)}") from e
        if not data.resource_logs:
            raise DecodeError("otlp_proto record holds no resourceLogs: not a LogsData")
        return [record for resource in data.resource_logs
                for scope in resource.scope_logs for record in scope.log_records]
    return _json_records(value, decoded)


def _json_records(value: bytes, decoded: DecodedRecord) -> list[LogRecord]:
    """OTLP/JSON: the GenAI records parsed one by one (ids hex, as OTLP/JSON writes them);
    the others are only counted, never parsed."""
    try:
        document = json.loads(value)
    except (ValueError, RecursionError) as e:
        raise DecodeError(f"not JSON: {one_line(e)}") from e
    resources = _list(document, "resourceLogs", "resource_logs") if isinstance(
        document, dict) else None
    if not resources:
        raise DecodeError("otlp_json record holds no resourceLogs: not a LogsData")
    found: list[LogRecord] = []
    for resource in resources:
        for scope in _list(resource, "scopeLogs", "scope_logs") or ():
            for node in _list(scope, "logRecords", "log_records") or ():
                if (not isinstance(node, dict) or not _json_is_genai(node)
                        or len(found) >= MAX_GENAI_RECORDS):
                    decoded.logs_dropped += 1
                    if len(found) >= MAX_GENAI_RECORDS:
                        decoded.problem = decoded.problem or TOO_MANY
                    continue
                record = _parse_json_record(node, decoded)
                if record is not None:
                    found.append(record)
    return found


def _parse_json_record(node: dict[str, Any], decoded: DecodedRecord) -> LogRecord | None:
    node = dict(node)
    for camel, proto, size in (("traceId", "trace_id", TRACE_ID_BYTES),
                               ("spanId", "span_id", SPAN_ID_BYTES)):
        raw = id_bytes(node.pop(camel, node.pop(proto, None)), size)
        node[camel] = base64.b64encode(raw).decode("ascii") if raw else ""
    record = LogRecord()
    try:
        json_format.ParseDict(node, record, ignore_unknown_fields=True)
    except PARSE_ERRORS as e:
        decoded.logs_dropped += 1
        decoded.invalid += 1
        decoded.problem = decoded.problem or f"log record: {bad_field(e)}"
        return None
    return record


def _json_is_genai(node: dict[str, Any]) -> bool:
    name = node.get("eventName", node.get("event_name"))
    if isinstance(name, str) and name:
        return name.startswith(GENAI_EVENT_PREFIX)
    for pair in node.get("attributes") or ():
        if isinstance(pair, dict) and pair.get("key") == EVENT_NAME:
            value = pair.get("value")
            text = value.get("stringValue", value.get("string_value")) if isinstance(
                value, dict) else None
            return isinstance(text, str) and text.startswith(GENAI_EVENT_PREFIX)
    return False


def _list(node: object, camel: str, proto: str) -> list[Any] | None:
    if not isinstance(node, dict):
        return None
    value = node.get(camel, node.get(proto))
    if value is not None and not isinstance(value, list):
        raise DecodeError(f"not an OTLP LogsData: {camel} is not a list")
    return value


def _event_name_attribute(record: LogRecord) -> str:
    for pair in record.attributes:
        if pair.key == EVENT_NAME:
            return pair.value.string_value
    return ""


def _attributes(record: LogRecord, cuts: Cuts) -> dict[str, Any]:
    found = attributes(record.attributes, cuts)
    found.pop(EVENT_NAME, None)
    if record.HasField("body"):
        body = any_value(record.body, cuts)
        if body is not None:
            found[EVENT_CONTENT] = body if isinstance(body, dict) else {"content": body}
    return found
