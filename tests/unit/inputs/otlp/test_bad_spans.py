"""One bad span in a batch costs that span alone, not the batch: the SDK's own encoder output
with one span corrupted, in both encodings; only records that are no TracesData at all raise."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf.message import DecodeError as ProtobufDecodeError
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from consumer.errors import DecodeError
from consumer.inputs import OtlpEncoding
from consumer.inputs.otlp.decode import decode_otlp
from consumer.telemetry.spans import DecodedRecord
from tests.support.otel_spans import Recorder, otlp_json, otlp_proto, rag_trace

QUESTIONS = ("Who wrote Dune, question one?", "Who wrote Dune, question two?",
             "Who wrote Dune, question six?")


def three_traces() -> bytes:
    """One exporter batch (proto) of three RAG traces: 15 spans, 9 of them GenAI."""
    recorder = Recorder()
    for question in QUESTIONS:
        rag_trace(recorder.tracer, question, http_spans=1)
    return otlp_proto(recorder.spans())


def trace_of(decoded: DecodedRecord, question: str) -> str:
    (chain,) = [s for s in decoded.kept if s.attributes.get("input.value") == question]
    return chain.trace_id


def assert_only_the_bad_span_is_lost(decoded: DecodedRecord, good: DecodedRecord) -> None:
    """Eight GenAI spans of three traces kept; the ninth (trace two's chain) counted."""
    assert len(decoded.kept) == 8
    assert decoded.invalid == 1
    assert decoded.dropped == good.dropped + 1
    kept_ids = {span.span_id for span in decoded.kept}
    lost = {span.span_id for span in good.kept} - kept_ids
    assert len(lost) == 1
    (lost_span,) = [span for span in good.kept if span.span_id in lost]
    assert lost_span.attributes["input.value"] == QUESTIONS[1]
    # The lost span still counts for its trace: its activity and (here) no root change.
    assert decoded.spans_per_trace == good.spans_per_trace
    assert decoded.roots_seen == good.roots_seen


def test_invalid_utf8_in_one_span_fails_protobuf_for_the_whole_batch_but_not_here() -> None:
    good_bytes = three_traces()
    good = decode_otlp(good_bytes, "otlp_proto")
    question = QUESTIONS[1].encode()
    corrupted = good_bytes.replace(question, question[:-2] + b"\xff?")  # same length
    assert corrupted != good_bytes
    # What upb does with the generated class: the whole message is refused.
    with pytest.raises(ProtobufDecodeError, match="UTF-8"):
        TracesData.FromString(corrupted)

    decoded = decode_otlp(corrupted, "otlp_proto")

    assert_only_the_bad_span_is_lost(decoded, good)
    assert decoded.problem is not None
    assert "UTF-8" in decoded.problem
    # The other traces read exactly as from the good bytes.
    assert trace_of(decoded, QUESTIONS[0]) == trace_of(good, QUESTIONS[0])


def test_a_root_span_with_invalid_utf8_still_lets_its_trace_close_when_quiet() -> None:
    recorder = Recorder()
    rag_trace(recorder.tracer, "Who wrote Dune?", http_spans=1)
    good_bytes = otlp_proto(recorder.spans())
    corrupted = good_bytes.replace(b"POST /ask", b"POST /as\xff")  # the HTTP root's name
    with pytest.raises(ProtobufDecodeError):
        TracesData.FromString(corrupted)
    good = decode_otlp(good_bytes, "otlp_proto")
    decoded = decode_otlp(corrupted, "otlp_proto")
    assert [s.span_id for s in decoded.kept] == [s.span_id for s in good.kept]
    assert decoded.roots_seen == good.roots_seen != set()
    assert decoded.spans_per_trace == good.spans_per_trace
    assert (decoded.invalid, decoded.dropped) == (1, good.dropped)  # dropped either way


def test_invalid_utf8_in_a_resource_attribute_loses_that_attribute_only() -> None:
    good_bytes = three_traces()
    corrupted = good_bytes.replace(b"python", b"pyth\xffn")  # telemetry.sdk.language
    with pytest.raises(ProtobufDecodeError):
        TracesData.FromString(corrupted)
    decoded = decode_otlp(corrupted, "otlp_proto")
    assert len(decoded.kept) == 9
    assert decoded.invalid == 0
    resource = decoded.kept[0].resource
    assert resource["service.name"] == "rag-api"
    assert "telemetry.sdk.language" not in resource
    assert decoded.problem is not None
    assert decoded.problem.startswith("resource partly unreadable")


def json_with(proto: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    """The batch as OTLP/JSON, ``change`` applied to trace two's chain span."""
    document = json.loads(otlp_json(proto))
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                values = {a["key"]: a["value"] for a in span.get("attributes", [])}
                if values.get("input.value") == {"stringValue": QUESTIONS[1]}:
                    change(span)
    return json.dumps(document).encode()


def set_attribute(value: Any) -> Callable[[dict[str, Any]], None]:
    def change(span: dict[str, Any]) -> None:
        span["attributes"].append({"key": "llm.token_count.total", "value": value})
    return change


def set_field(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(span: dict[str, Any]) -> None:
        span[name] = value
    return change


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (set_attribute({"intValue": "forty-two"}), "intValue"),
        (set_attribute({"intValue": 1.5}), "intValue"),
        (set_attribute({"stringValue": 42}), "stringValue"),
        (set_attribute({"arrayValue": {"values": 5}}), "arrayValue"),
        (set_attribute({"boolValue": "yes"}), "boolValue"),
        (set_field("name", "lone \ud800 surrogate"), "surrogate"),
        # Where protobuf looks a name up, a lone surrogate makes its C code raise SystemError.
        (set_field("kind", "\ud800"), "lone surrogate"),
        (set_field("status", "\ud800"), "lone surrogate"),
        (set_field("events", [{"name": "x", "attributes": "\ud800"}]), "events"),
        (set_field("attributes", "not a list"), "attributes"),
        (set_field("startTimeUnixNano", "yesterday"), "startTimeUnixNano"),
    ],
    ids=["int-not-integer", "int-fraction", "string-is-number", "array-values-a-number",
         "bool-is-string",
         "lone-surrogate", "surrogate-for-an-enum", "surrogate-for-a-message",
         "surrogate-for-event-attributes", "attributes-not-a-list", "time-not-a-number"],
)
def test_one_unparseable_json_span_is_left_out_alone(
    change: Callable[[dict[str, Any]], None], reason: str
) -> None:
    proto = three_traces()
    good = decode_otlp(otlp_json(proto), "otlp_json")
    decoded = decode_otlp(json_with(proto, change), "otlp_json")
    if reason == "attributes":  # no attributes left to read: not a GenAI span, dropped plainly
        assert (len(decoded.kept), decoded.invalid) == (8, 0)
        return
    assert_only_the_bad_span_is_lost(decoded, good)
    assert decoded.problem is not None
    assert reason in decoded.problem
    assert "\n" not in decoded.problem


def test_an_unparseable_json_resource_attribute_loses_that_attribute_only() -> None:
    document = json.loads(otlp_json(three_traces()))
    attributes = document["resourceSpans"][0]["resource"]["attributes"]
    attributes.append({"key": "deployment.replica", "value": {"intValue": "two"}})
    decoded = decode_otlp(json.dumps(document).encode(), "otlp_json")
    assert (len(decoded.kept), decoded.invalid) == (9, 0)
    resource = decoded.kept[0].resource
    assert resource["service.name"] == "rag-api"
    assert "deployment.replica" not in resource
    assert decoded.problem is not None
    assert "intValue" in decoded.problem


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_a_record_whose_every_span_is_unreadable_is_read_as_empty_not_dead_lettered(
    encoding: OtlpEncoding,
) -> None:
    """Its frame is a TracesData: the spans are counted and logged, the record is done."""
    good_bytes = three_traces()
    if encoding == "otlp_proto":
        data = TracesData.FromString(good_bytes)
        for resource_spans in data.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    span.name = "MARK"
        value = data.SerializeToString().replace(b"MARK", b"MAR\xff")
    else:
        document = json.loads(otlp_json(good_bytes))
        for resource_spans in document["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    span["spanId"] = "not an id"
        value = json.dumps(document).encode()
    decoded = decode_otlp(value, encoding)
    assert decoded.kept == []
    assert decoded.invalid == decoded.dropped == 15


def test_a_json_span_that_is_no_object_is_left_out_alone() -> None:
    document = json.loads(otlp_json(three_traces()))
    document["resourceSpans"][0]["scopeSpans"][0]["spans"].append(7)
    decoded = decode_otlp(json.dumps(document).encode(), "otlp_json")
    assert (len(decoded.kept), decoded.invalid) == (9, 1)
    assert decoded.problem == "a span is not a JSON object but int"


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(lambda b: b[: len(b) // 2], id="truncated"),
        pytest.param(lambda b: b"\x0a\xff\xff\xff\xff\x0f" + b, id="impossible-length"),
        pytest.param(lambda b: b"\x8a" * 20, id="bad-varint"),
    ],
)
def test_a_proto_record_whose_frame_is_broken_is_still_refused(
    value: Callable[[bytes], bytes],
) -> None:
    with pytest.raises(DecodeError) as raised:
        decode_otlp(value(three_traces()), "otlp_proto")
    assert raised.value.reason.startswith("not an OTLP protobuf TracesData")


SECRET = "sk-live-SUPERSECRET-123"


@pytest.mark.parametrize(
    "change",
    [
        set_attribute({"intValue": SECRET}),
        set_field("startTimeUnixNano", SECRET),
        set_attribute({"arrayValue": {"values": {"card": SECRET}}}),
        set_attribute({"intValue": f"call me at {SECRET}"}),  # " at " is also protobuf's
        set_attribute({"doubleValue": f"reach me at {SECRET}"}),
        set_field("startTimeUnixNano", f"x at Span.{SECRET.replace('-', '_')}"),
    ],
    ids=["int-attribute", "time-field", "array-values", "value-with-at", "double-with-at",
         "value-like-a-path"],
)
def test_an_unreadable_value_is_never_quoted_in_the_reason(
    change: Callable[[dict[str, Any]], None]
) -> None:
    # Span attributes may hold secrets or personal data: a reason that reaches a log line
    # names the field and what was wrong, never the value.
    decoded = decode_otlp(json_with(three_traces(), change), "otlp_json")
    assert decoded.problem is not None
    assert decoded.invalid == 1
    assert SECRET not in decoded.problem
    assert "SUPERSECRET" not in decoded.problem
