"""OTLP decoding: SDK spans round-trip in both encodings, GenAI spans kept, bad input bounded."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, TracesData
from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan
from opentelemetry.sdk.trace import ReadableSpan

from consumer.errors import DecodeError
from consumer.inputs import OtlpEncoding
from consumer.inputs.otlp.decode import decode_otlp
from consumer.inputs.otlp.json_spans import INVALID_IDS
from consumer.inputs.otlp.values import MAX_ARRAY_ITEMS, MAX_ATTRIBUTE_CHARS, MAX_DEPTH
from consumer.telemetry.spans import DecodedRecord
from tests.support.otel_spans import (
    KIND,
    Recorder,
    as_base64,
    otlp_json,
    otlp_proto,
    rag_trace,
    rewrite_ids,
)

ENCODINGS: list[OtlpEncoding] = ["otlp_proto", "otlp_json"]
TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
GOOD = OtlpSpan(trace_id=TRACE, span_id=b"\x01" * 8, name="llm")
GOOD.attributes.add(key=KIND).value.string_value = "LLM"


def encoded(proto: bytes, encoding: OtlpEncoding) -> bytes:
    return proto if encoding == "otlp_proto" else otlp_json(proto)


def records(*spans: OtlpSpan) -> bytes:
    """Hand-built spans (shapes the SDK never writes) in one ``TracesData``."""
    return bytes(
        TracesData(
            resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
        ).SerializeToString()
    )


def decode_spans(*spans: OtlpSpan, encoding: OtlpEncoding = "otlp_proto") -> DecodedRecord:
    return decode_otlp(encoded(records(*spans), encoding), encoding)


def one_rag_trace() -> list[ReadableSpan]:
    recorder = Recorder()
    rag_trace(recorder.tracer)
    return recorder.spans()


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_an_sdk_trace_round_trips_keeping_only_its_genai_spans(encoding: OtlpEncoding) -> None:
    sdk = one_rag_trace()
    decoded = decode_otlp(encoded(otlp_proto(sdk), encoding), encoding)
    genai = {s.name: s for s in sdk if KIND in (s.attributes or {})}
    assert sorted(s.name for s in decoded.kept) == sorted(genai) == ["chat", "query", "retrieve"]
    for span in decoded.kept:
        original = genai[span.name]
        parent = original.parent
        assert span.trace_id == f"{original.context.trace_id:032x}"
        assert span.span_id == f"{original.context.span_id:016x}"
        assert span.parent_span_id == (f"{parent.span_id:016x}" if parent else None)
        assert dict(span.attributes) == dict(original.attributes or {})
        assert (span.start_unix_nano, span.end_unix_nano) == (
            original.start_time,
            original.end_time,
        )
        assert span.resource["service.name"] == "rag-api"
    trace_id = decoded.kept[0].trace_id
    assert decoded.dropped == 3  # the HTTP root and two database spans
    assert decoded.invalid == 0
    assert decoded.roots_seen == {trace_id}  # the root was dropped, its arrival remembered
    assert decoded.spans_per_trace == {trace_id: 6}


def test_both_encodings_decode_to_the_same_spans() -> None:
    proto = otlp_proto(one_rag_trace())
    assert decode_otlp(proto, "otlp_proto") == decode_otlp(otlp_json(proto), "otlp_json")


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_one_record_holds_many_traces(encoding: OtlpEncoding) -> None:
    recorder = Recorder()
    for question in ("a?", "b?", "c?"):
        rag_trace(recorder.tracer, question, http_spans=1)
    decoded = decode_otlp(encoded(otlp_proto(recorder.spans()), encoding), encoding)
    traces = {span.trace_id for span in decoded.kept}
    assert len(traces) == 3
    assert decoded.roots_seen == traces
    assert decoded.spans_per_trace == dict.fromkeys(traces, 5)
    assert (len(decoded.kept), decoded.dropped) == (9, 6)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_one_trace_spread_over_records_sees_its_root_in_the_last(encoding: OtlpEncoding) -> None:
    sdk = one_rag_trace()  # in end order: the root ends last
    first, second = (
        decode_otlp(encoded(otlp_proto(part), encoding), encoding) for part in (sdk[:3], sdk[3:])
    )
    trace_id = f"{sdk[0].context.trace_id:032x}"
    assert first.roots_seen == set()
    assert second.roots_seen == {trace_id}
    assert first.spans_per_trace[trace_id] + second.spans_per_trace[trace_id] == 6
    assert len(first.kept) + len(second.kept) == 3


@pytest.mark.parametrize(
    ("key", "on_event"),
    [
        ("gen_ai.operation.name", False),
        ("langfuse.trace.output", False),
        ("gen_ai.choice", True),  # an event's name
    ],
    ids=["gen_ai-attribute", "langfuse-attribute", "gen_ai-event"],
)
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_other_conventions_keep_a_span(key: str, on_event: bool, encoding: OtlpEncoding) -> None:
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("work") as span:
        if on_event:
            span.add_event(key, {"message": "hi"})
        else:
            span.set_attribute(key, "chat")
    decoded = decode_otlp(encoded(otlp_proto(recorder.spans()), encoding), encoding)
    assert [span.name for span in decoded.kept] == ["work"]
    if on_event:
        event = decoded.kept[0].events[0]
        assert (event.name, dict(event.attributes)) == (key, {"message": "hi"})
        assert event.time_unix_nano > 0


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_genai_resource_attributes_do_not_keep_a_span(encoding: OtlpEncoding) -> None:
    data = TracesData.FromString(otlp_proto(one_rag_trace()[:1]))  # one database span
    data.resource_spans[0].resource.attributes.add(
        key="gen_ai.system"
    ).value.string_value = "openai"
    decoded = decode_otlp(encoded(bytes(data.SerializeToString()), encoding), encoding)
    assert (decoded.kept, decoded.dropped) == ([], 1)


def test_attribute_values_become_plain_python_values() -> None:
    span = OtlpSpan()
    span.CopyFrom(GOOD)
    values = {
        "s": AnyValue(string_value="x"),
        "b": AnyValue(bool_value=True),
        "i": AnyValue(int_value=-(2**63)),
        "d": AnyValue(double_value=0.5),
        "raw": AnyValue(bytes_value=b"\x00\xff"),
        "arr": AnyValue(
            array_value=ArrayValue(values=[AnyValue(int_value=1), AnyValue(string_value="2")])
        ),
        "kv": AnyValue(
            kvlist_value=KeyValueList(values=[KeyValue(key="k", value=AnyValue(bool_value=False))])
        ),
        "empty": AnyValue(),
    }
    span.attributes.extend(KeyValue(key=k, value=v) for k, v in values.items())
    for encoding in ENCODINGS:
        (kept,) = decode_spans(span, encoding=encoding).kept
        assert dict(kept.attributes) == {
            KIND: "LLM",
            "s": "x",
            "b": True,
            "i": -(2**63),
            "d": 0.5,
            "raw": b"\x00\xff",
            "arr": (1, "2"),
            "kv": {"k": False},
        }, encoding


def huge(kind: str) -> AnyValue:
    if kind == "string":
        return AnyValue(string_value="x" * 10_000_000)
    if kind == "bytes":
        return AnyValue(bytes_value=b"x" * 10_000_000)
    if kind == "array":
        return AnyValue(
            array_value=ArrayValue(values=[AnyValue(int_value=1)] * (MAX_ARRAY_ITEMS + 5))
        )
    nested = AnyValue(string_value="leaf")
    for _ in range(MAX_DEPTH + 3):
        nested = AnyValue(array_value=ArrayValue(values=[nested]))
    return nested


def depth(value: Any) -> int:
    return 1 + depth(value[0]) if isinstance(value, tuple) and value else 0


@pytest.mark.parametrize("kind", ["string", "bytes", "array", "nesting"], ids=lambda k: f"huge-{k}")
def test_oversized_attributes_are_cut_not_refused(kind: str) -> None:
    span = OtlpSpan()
    span.CopyFrom(GOOD)
    span.attributes.add(key="big").value.CopyFrom(huge(kind))
    decoded = decode_spans(span)
    big = decoded.kept[0].attributes["big"]
    expected = {
        "string": MAX_ATTRIBUTE_CHARS,
        "bytes": MAX_ATTRIBUTE_CHARS,
        "array": MAX_ARRAY_ITEMS,
    }
    assert depth(big) == MAX_DEPTH if kind == "nesting" else len(big) == expected[kind]
    assert decoded.cut_values == 1


@pytest.mark.parametrize(
    "ids",
    [
        {"trace_id": b""},
        {"trace_id": TRACE[:15]},
        {"trace_id": bytes(16)},
        {"span_id": b""},
        {"span_id": b"\x01" * 9},
        {"span_id": bytes(8)},
        {"parent_span_id": b"\x02" * 7},
    ],
    ids=[
        "no-trace-id",
        "short-trace-id",
        "zero-trace-id",
        "no-span-id",
        "long-span-id",
        "zero-span-id",
        "short-parent-id",
    ],
)
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_span_with_bad_ids_is_dropped_alone(
    ids: dict[str, bytes], encoding: OtlpEncoding
) -> None:
    bad = OtlpSpan()
    bad.CopyFrom(GOOD)
    for field_name, value in ids.items():
        setattr(bad, field_name, value)
    decoded = decode_spans(bad, GOOD, encoding=encoding)
    assert [span.span_id for span in decoded.kept] == ["01" * 8]
    assert (decoded.dropped, decoded.invalid) == (1, 1)
    assert decoded.problem == INVALID_IDS  # the reason the record's warning gives


def json_document(**span_fields: Any) -> bytes:
    span = {
        "traceId": TRACE.hex(),
        "spanId": "01" * 8,
        "name": "llm",
        "attributes": [{"key": KIND, "value": {"stringValue": "LLM"}}],
        **span_fields,
    }
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


@pytest.mark.parametrize(
    "span_fields",
    [
        {"traceId": "zz" * 16},
        {"traceId": 12},
        {"spanId": TRACE.hex()},
        {"parentSpanId": "abc"},
        {"traceId": base64.b64encode(TRACE[:12]).decode()},
    ],
    ids=[
        "non-hex-trace-id",
        "number-trace-id",
        "trace-id-as-span-id",
        "short-parent-id",
        "base64-of-12-bytes",
    ],
)
def test_malformed_json_ids_drop_the_span(span_fields: dict[str, Any]) -> None:
    decoded = decode_otlp(json_document(**span_fields), "otlp_json")
    assert (decoded.kept, decoded.dropped, decoded.invalid) == ([], 1, 1)


@pytest.mark.parametrize(
    "spell",
    [as_base64, lambda h: as_base64(h).rstrip("="), str.upper],
    ids=["base64", "unpadded-base64", "upper-case-hex"],
)
def test_json_ids_in_other_spellings_are_read(spell: Callable[[str], str]) -> None:
    proto = otlp_proto(one_rag_trace())
    rewritten = json.dumps(rewrite_ids(json.loads(otlp_json(proto)), spell)).encode()
    expected = decode_otlp(proto, "otlp_proto")
    decoded = decode_otlp(rewritten, "otlp_json")
    assert [(s.trace_id, s.span_id, s.parent_span_id) for s in decoded.kept] == [
        (s.trace_id, s.span_id, s.parent_span_id) for s in expected.kept
    ]
    assert decoded.roots_seen == expected.roots_seen


def test_json_with_proto_field_names_and_numeric_int64s_is_read() -> None:
    document = {
        "resource_spans": [
            {
                "scope_spans": [
                    {
                        "spans": [
                            {
                                "trace_id": TRACE.hex(),
                                "span_id": "01" * 8,
                                "parent_span_id": "",
                                "name": "llm",
                                "start_time_unix_nano": 1_700_000_000_000_000_000,
                                "end_time_unix_nano": "1700000000000000001",
                                "kind": 3,
                                "attributes": [{"key": KIND, "value": {"int_value": 7}}],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    (span,) = decode_otlp(json.dumps(document).encode(), "otlp_json").kept
    assert (span.parent_span_id, span.start_unix_nano, span.end_unix_nano) == (
        None,
        1_700_000_000_000_000_000,
        1_700_000_000_000_000_001,
    )
    assert span.attributes[KIND] == 7  # a wrong type is passed on; mapping judges it


@pytest.mark.parametrize(
    ("value", "encoding", "reason"),
    [
        (b"\xff\xfe\xfd garbage \x00\x01", "otlp_proto", "not an OTLP protobuf TracesData"),
        (b"", "otlp_proto", "no resourceSpans"),
        (b'{"resourceSpans": []}', "otlp_proto", "not an OTLP protobuf TracesData"),
        (b"{not json", "otlp_json", "not JSON"),
        (b"\xff\xfe{}", "otlp_json", "not JSON"),
        (b"[1, 2]", "otlp_json", "must be an object, got list"),
        (b"{}", "otlp_json", "no resourceSpans"),
        (b'{"resourceSpans": "x"}', "otlp_json", "not an OTLP TracesData"),
        (
            b'{"resourceSpans": [{"scopeSpans": [7]}]}',
            "otlp_json",
            "not an OTLP TracesData",
        ),
        (b'{"resourceSpans": []}\n{"resourceSpans": []}', "otlp_json", "not JSON"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": '
            + b"[" * 5000
            + b"]" * 5000
            + b"}]}]}]}",
            "otlp_json",
            "not JSON",
        ),
    ],
    ids=[
        "garbage-bytes",
        "empty-proto",
        "json-in-proto-topic",
        "invalid-json",
        "not-utf8",
        "json-array",
        "empty-object",
        "resource-spans-not-a-list",
        "scope-spans-not-an-object",
        "two-documents",
        "deep-nesting",
    ],
)
def test_undecodable_records_raise_a_one_line_reason(
    value: bytes, encoding: OtlpEncoding, reason: str
) -> None:
    with pytest.raises(DecodeError) as raised:
        decode_otlp(value, encoding)
    assert reason in raised.value.reason
    assert "\n" not in raised.value.reason


def test_a_record_without_genai_keys_keeps_nothing_and_still_sees_roots() -> None:
    recorder = Recorder()
    with (
        recorder.tracer.start_as_current_span("GET /health"),
        recorder.tracer.start_as_current_span("SELECT 1"),
    ):
        pass
    decoded = decode_otlp(otlp_proto(recorder.spans()), "otlp_proto")
    assert (decoded.kept, decoded.dropped, len(decoded.roots_seen)) == ([], 2, 1)


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_an_openllmetry_task_span_with_only_traceloop_keys_is_kept(encoding: OtlpEncoding) -> None:
    """The OpenLLMetry SDK's ``@task`` records its output under ``traceloop.*`` alone."""
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("retrieve_documents.task") as task:
        task.set_attributes({"traceloop.span.kind": "task",
                             "traceloop.entity.name": "retrieve_documents",
                             "traceloop.entity.output": '["Dune is by Frank Herbert."]'})
    with recorder.tracer.start_as_current_span("GET /health"):
        pass
    proto = otlp_proto(recorder.spans())
    decoded = decode_otlp(proto if encoding == "otlp_proto" else otlp_json(proto), encoding)
    assert [span.name for span in decoded.kept] == ["retrieve_documents.task"]
    assert decoded.dropped == 1
