"""OTLP log records -> GenAI log events: the SDK's own encoding (protobuf, and the JSON the
collector writes), what is dropped and counted, and what is refused whole."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format
from opentelemetry.proto.logs.v1.logs_pb2 import LogsData

from consumer.errors import DecodeError
from consumer.inputs import OtlpEncoding
from consumer.inputs.otlp.logs import EVENT_CONTENT, decode_otlp_logs
from tests.support.genai_logs import LoggedChats, logs_json, logs_proto
from tests.support.otel_spans import as_base64

ENCODINGS: list[OtlpEncoding] = ["otlp_proto", "otlp_json"]


def _value(proto: bytes, encoding: OtlpEncoding) -> bytes:
    return proto if encoding == "otlp_proto" else logs_json(proto)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_chat_calls_log_records_become_events_of_its_span_with_their_bodies(
    encoding: OtlpEncoding,
) -> None:
    chat = LoggedChats().chat("Who wrote Dune?", "Frank Herbert.")
    decoded = decode_otlp_logs(_value(chat.logs_value(), encoding), encoding)
    assert [e.event.name for e in decoded.logs] == [
        "gen_ai.system.message", "gen_ai.user.message", "gen_ai.choice"]
    assert {(e.trace_id, e.span_id) for e in decoded.logs} == {(chat.trace_id, chat.chat_span_id)}
    choice = decoded.logs[2].event.attributes
    assert choice[EVENT_CONTENT]["message"] == {"role": "assistant", "content": "Frank Herbert."}
    assert choice["gen_ai.system"] == "openai"
    assert decoded.logs[1].event.attributes[EVENT_CONTENT] == {"content": "Who wrote Dune?"}
    assert decoded.spans_per_trace == {chat.trace_id: 3}
    assert (decoded.kept, decoded.dropped, decoded.logs_dropped) == ([], 0, 0)


def _with_others(encoding: OtlpEncoding) -> tuple[bytes, str]:
    """A chat's records among a service's ordinary logs and a GenAI one without a trace."""
    chat = LoggedChats().chat("Who wrote Dune?", "Frank Herbert.")
    document = json.loads(logs_json(chat.logs_value()))
    records = document["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    records.append({"body": {"stringValue": "GET /health 200"}, "traceId": chat.trace_id})
    records.append({"eventName": "gen_ai.user.message", "body": {"stringValue": "lost"}})
    # The name as older SDKs wrote it: an ``event.name`` attribute, a text body.
    records.append({"attributes": [{"key": "event.name",
                                    "value": {"stringValue": "gen_ai.user.message"}}],
                    "body": {"stringValue": "And Emma?"}, "traceId": chat.trace_id,
                    "spanId": chat.chat_span_id})
    value = json.dumps(document).encode()
    if encoding == "otlp_proto":
        for node in records:
            for key in ("traceId", "spanId"):
                if key in node:
                    node[key] = as_base64(node[key])
        value = json_format.ParseDict(document, LogsData()).SerializeToString()
    return value, chat.trace_id


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_ordinary_logs_and_genai_records_without_a_trace_are_dropped_and_counted(
    encoding: OtlpEncoding,
) -> None:
    value, trace_id = _with_others(encoding)
    decoded = decode_otlp_logs(value, encoding)
    assert len(decoded.logs) == 4
    assert decoded.logs[-1].event.attributes == {EVENT_CONTENT: {"content": "And Emma?"}}
    assert decoded.logs_dropped == 2
    assert decoded.invalid == 1
    assert decoded.problem == "a GenAI log record without a valid trace id"
    assert decoded.spans_per_trace == {trace_id: 4}


def test_a_json_record_that_does_not_parse_is_left_out_alone_without_its_value() -> None:
    chat = LoggedChats().chat("Who wrote Dune?", "Frank Herbert.")
    document = json.loads(logs_json(chat.logs_value()))
    records = document["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    records[0]["timeUnixNano"] = "sk-secret-not-a-number"
    records[1]["body"] = {"stringValue": "\ud800"}  # a lone surrogate
    decoded = decode_otlp_logs(json.dumps(document).encode(), "otlp_json")
    assert [e.event.name for e in decoded.logs] == ["gen_ai.choice"]
    assert (decoded.logs_dropped, decoded.invalid) == (2, 2)
    assert decoded.problem is not None
    assert "sk-secret" not in decoded.problem


@pytest.mark.parametrize(("value", "encoding", "reason"), [
    (b"\xff\x00garbage", "otlp_proto", "no LogsData"),
    (b"", "otlp_proto", "no resourceLogs"),
    (b"not json", "otlp_json", "not JSON"),
    (b'{"resourceSpans": []}', "otlp_json", "no resourceLogs"),
    (b'{"resourceLogs": {"a": 1}}', "otlp_json", "not a list"),
])
def test_a_record_that_is_no_logs_data_is_a_decode_error(
    value: bytes, encoding: OtlpEncoding, reason: str,
) -> None:
    with pytest.raises(DecodeError, match=reason):
        decode_otlp_logs(value, encoding)


def test_a_logs_data_with_an_empty_resource_decodes_to_nothing() -> None:
    assert logs_proto([]) == b"", "the SDK encodes an empty batch as no bytes: refused above"
    decoded = decode_otlp_logs(b"\n\x00", "otlp_proto")  # resource_logs: [{}]
    assert (decoded.logs, decoded.logs_dropped) == ([], 0)


def test_past_the_bound_of_genai_records_per_record_the_rest_are_counted_not_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("consumer.inputs.otlp.logs.MAX_GENAI_RECORDS", 2)
    chat = LoggedChats().chat("Who wrote Dune?", "Frank Herbert.")
    for encoding in ENCODINGS:
        decoded = decode_otlp_logs(_value(chat.logs_value(), encoding), encoding)
        assert (len(decoded.logs), decoded.logs_dropped) == (2, 1), encoding
        assert decoded.problem is not None
        assert "GenAI log records in one record" in decoded.problem
