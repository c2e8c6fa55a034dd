"""Record bytes -> TraceEvent, and every way a record can be malformed."""

from __future__ import annotations

import json
from typing import Any

import pytest
import structlog

from consumer.errors import DecodeError
from consumer.inputs.trace_json import decode_trace
from schemas.trace import MAX_TRACE_ID_CHARS


def test_minimal_trace_decodes() -> None:
    trace = decode_trace(b'{"trace_id": "t1", "output": "Paris.", "extra": 1}')
    assert trace.trace_id == "t1"
    assert trace.output == "Paris."
    assert trace.retrieved_documents is None


def test_plain_strings_are_documents() -> None:
    value = {"trace_id": "t", "retrieved_documents": ["a", {"content": "b", "id": "d2"}]}
    trace = decode_trace(json.dumps(value).encode())
    assert trace.retrieved_documents is not None
    assert [d.content for d in trace.retrieved_documents] == ["a", "b"]
    assert trace.retrieved_documents[1].id == "d2"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        pytest.param(None, "tombstone", id="tombstone"),
        pytest.param(b"\xff\xfe", "not UTF-8", id="not-utf8"),
        pytest.param(b"", "not valid JSON", id="empty-bytes"),
        pytest.param(b"{", "not valid JSON", id="truncated-json"),
        pytest.param(b"[1, 2]", "JSON list", id="array"),
        pytest.param(b'"text"', "JSON str", id="string"),
        pytest.param(b"null", "JSON NoneType", id="null"),
        pytest.param(b'{"output": "x"}', "trace_id: Field required", id="no-trace-id"),
        pytest.param(b'{"trace_id": ""}', "trace_id", id="empty-trace-id"),
        pytest.param(b'{"trace_id": "  "}', "blank", id="blank-trace-id"),
        pytest.param(b'{"trace_id": true}', "valid string", id="boolean-trace-id"),
        pytest.param(b'{"trace_id": 7.0}', "valid string", id="float-trace-id"),
        pytest.param(b'{"trace_id": -0.0}', "valid string", id="negative-zero-trace-id"),
        pytest.param(b'{"trace_id": "t", "output": 5}', "output", id="numeric-output"),
        pytest.param(b'{"trace_id": "t", "retrieved_documents": 5}', "retrieved_documents",
                     id="documents-not-list"),
        pytest.param(b'{"trace_id": "t", "retrieved_documents": [{"id": "x"}]}', "content",
                     id="document-without-content"),
        pytest.param(b'{"trace_id": "a", "trace_id": "b"}', "duplicate key", id="duplicate-key"),
        pytest.param(b'{"trace_id": "t", "x": NaN}', "NaN", id="nan"),
        pytest.param(b'{"trace_id": "t", "x": ' + b"9" * 5000 + b"}", "not valid JSON",
                     id="huge-integer"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, "nested too deeply", id="deep-nesting"),
        pytest.param(b'{"trace_id": "\\ud800"}', "surrogate", id="lone-surrogate"),
    ],
)
def test_malformed_records_raise_decode_error(value: bytes | None, reason: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode_trace(value)
    assert reason in caught.value.reason
    assert len(caught.value.reason) <= 300
    assert "\n" not in caught.value.reason


@pytest.mark.parametrize(
    "output",
    [
        pytest.param(None, id="null"),
        pytest.param("", id="empty"),
        pytest.param("   ", id="spaces"),
        pytest.param("\n\t \r\n", id="whitespace"),
    ],
)
def test_empty_outputs_are_recognised(output: str | None) -> None:
    value = {"trace_id": "t", "output": output}
    assert decode_trace(json.dumps(value).encode()).has_output is False


def test_missing_output_is_empty() -> None:
    assert decode_trace(b'{"trace_id": "t"}').has_output is False


def test_nul_and_bidi_characters_survive_as_data() -> None:
    trace = decode_trace(json.dumps({"trace_id": "t", "output": "a\u0000b\u202ec"}).encode())
    assert trace.output == "a\u0000b\u202ec"
    assert trace.has_output


# -- optional fields in other JSON types (issue 10) -------------------------------------------


@pytest.mark.parametrize(
    ("timestamp", "instant"),
    [
        pytest.param(1714565400, "2024-05-01T12:10:00Z", id="epoch-seconds"),
        pytest.param(1714565400.25, "2024-05-01T12:10:00.250000Z", id="epoch-seconds-float"),
        pytest.param(1714565400123, "2024-05-01T12:10:00.123000Z", id="epoch-milliseconds"),
        pytest.param(1714565400123456, "2024-05-01T12:10:00.123456Z", id="epoch-microseconds"),
        pytest.param(1714565400123456789, "2024-05-01T12:10:00.123456Z",
                     id="epoch-nanoseconds"),
        pytest.param(0, "1970-01-01T00:00:00Z", id="epoch-zero"),
        pytest.param(-86400, "1969-12-31T00:00:00Z", id="before-1970"),
        pytest.param(99_999_999_999, "5138-11-16T09:46:39Z", id="largest-seconds"),
        pytest.param(100_000_000_000, "1973-03-03T09:46:40Z", id="smallest-milliseconds"),
        pytest.param("2024-05-01T12:10:00Z", "2024-05-01T12:10:00Z", id="iso-string-kept"),
        pytest.param("yesterday", "yesterday", id="any-string-kept"),
    ],
)
def test_epoch_number_timestamps_are_instants(timestamp: object, instant: str) -> None:
    value = {"trace_id": "t", "output": "x", "timestamp": timestamp}
    assert decode_trace(json.dumps(value).encode()).timestamp == instant


@pytest.mark.parametrize(
    ("fields", "project_id", "document_id"),
    [
        pytest.param({"project_id": 42}, "42", None, id="numeric-project-id"),
        pytest.param({"project_id": -7}, "-7", None, id="negative-project-id"),
        pytest.param({"retrieved_documents": [{"content": "a", "id": 1001}]}, None, "1001",
                     id="numeric-document-id"),
        pytest.param({"retrieved_documents": [{"content": "a", "id": 2**70}]}, None,
                     str(2**70), id="document-id-beyond-64-bits"),
        pytest.param({"project_id": "p-1", "retrieved_documents": [{"content": "a",
                                                                     "id": "d-1"}]},
                     "p-1", "d-1", id="string-ids-unchanged"),
        pytest.param({"project_id": 12.0}, "12", None, id="whole-float-project-id"),
        pytest.param({"project_id": -0.0}, "0", None, id="negative-zero-project-id"),
        pytest.param({"project_id": float(2**53)}, str(2**53), None, id="largest-safe-float"),
        pytest.param({"retrieved_documents": [{"content": "a", "id": 3.0}]}, None, "3",
                     id="whole-float-document-id"),
    ],
)
def test_integer_and_whole_float_ids_are_read_as_strings(
    fields: dict[str, object], project_id: str | None, document_id: str | None
) -> None:
    trace = decode_trace(json.dumps({"trace_id": "t", "output": "x", **fields}).encode())
    assert trace.project_id == project_id
    if document_id is not None:
        assert trace.retrieved_documents is not None
        assert trace.retrieved_documents[0].id == document_id


@pytest.mark.parametrize(
    ("trace_id", "expected"),
    [
        pytest.param(1234567890123456789, "1234567890123456789", id="datadog-64-bit"),
        pytest.param(7, "7", id="small"),
        pytest.param(0, "0", id="zero"),
        pytest.param(-42, "-42", id="negative"),
        pytest.param(2**70, str(2**70), id="beyond-64-bits"),
    ],
)
def test_an_integer_trace_id_is_read_as_its_decimal_string(trace_id: int, expected: str) -> None:
    trace = decode_trace(json.dumps({"trace_id": trace_id, "output": "x"}).encode())
    assert trace.trace_id == expected


# A carried-along field (not read to judge) with no reading is dropped; the trace is judged.
DROPPED = [
    pytest.param({"timestamp": True}, "timestamp", id="timestamp-bool"),
    pytest.param({"timestamp": [1]}, "timestamp", id="timestamp-list"),
    pytest.param({"timestamp": 10**21}, "timestamp", id="timestamp-past-year-9999"),
    pytest.param({"timestamp": -(10**21)}, "timestamp", id="timestamp-before-year-1"),
    pytest.param({"timestamp": 1e300}, "timestamp", id="timestamp-1e300"),
    pytest.param({"project_id": True}, "project_id", id="project-id-bool"),
    pytest.param({"project_id": 4.5}, "project_id", id="project-id-fraction"),
    pytest.param({"project_id": 1e30}, "project_id", id="project-id-beyond-exact-floats"),
    pytest.param({"project_id": float(2**53 + 2)}, "project_id", id="project-id-past-2-53"),
    pytest.param({"metadata": ["a"]}, "metadata", id="metadata-list"),
    pytest.param({"metadata": "m"}, "metadata", id="metadata-string"),
    pytest.param({"schema_version": "one"}, "schema_version", id="schema-version-string"),
    pytest.param({"retrieved_documents": [{"content": "a", "id": {"n": 1}}]},
                 "retrieved_documents.0.id", id="document-id-object"),
    pytest.param({"retrieved_documents": ["b", {"content": "a", "id": False}]},
                 "retrieved_documents.1.id", id="document-id-bool"),
    pytest.param({"retrieved_documents": [{"content": "a", "metadata": "m"}]},
                 "retrieved_documents.0.metadata", id="document-metadata-string"),
]


@pytest.mark.usefixtures("default_structlog")
@pytest.mark.parametrize(("fields", "where"), DROPPED)
def test_a_carried_field_without_a_reading_is_dropped_not_dead_lettered(
    fields: dict[str, object], where: str
) -> None:
    value = {"trace_id": "t", "output": "x", "input": "q", **fields}
    with structlog.testing.capture_logs() as logs:
        trace = decode_trace(json.dumps(value).encode())
    assert (trace.trace_id, trace.output, trace.input) == ("t", "x", "q")
    dropped: Any = trace.model_dump()
    for part in where.split("."):
        dropped = dropped[int(part) if part.isdigit() else part]
    assert dropped is None
    if "retrieved_documents" in fields:
        assert trace.retrieved_documents is not None
        assert trace.retrieved_documents[-1].content == "a"
    assert [(log["event"], log["field"], log["log_level"]) for log in logs] == [
        ("trace_field_dropped", where, "debug")]


def test_a_timestamp_of_infinity_is_dropped() -> None:
    trace = decode_trace(b'{"trace_id": "t", "output": "x", "timestamp": 1e999}')
    assert (trace.output, trace.timestamp) == ("x", None)


def test_a_field_read_to_judge_is_named_even_beside_a_dropped_one() -> None:
    value = {"trace_id": "t", "output": 5, "timestamp": True, "project_id": [1]}
    with pytest.raises(DecodeError) as caught:
        decode_trace(json.dumps(value).encode())
    assert caught.value.reason == (
        "not a trace event: output: Input should be a valid string (1 problem(s))")


# -- trace_id bound (issue 13) ----------------------------------------------------------------


def test_trace_id_up_to_the_limit_decodes() -> None:
    trace_id = "\U0001f600" * MAX_TRACE_ID_CHARS  # the limit counts characters, not bytes
    value = json.dumps({"trace_id": trace_id, "output": "x"}).encode()
    assert decode_trace(value).trace_id == trace_id


@pytest.mark.parametrize(
    "length", [pytest.param(MAX_TRACE_ID_CHARS + 1, id="one-over"),
               pytest.param(1_000_000, id="one-million")],
)
def test_trace_id_over_the_limit_is_refused(length: int) -> None:
    value = json.dumps({"trace_id": "x" * length, "output": "x"}).encode()
    with pytest.raises(DecodeError) as caught:
        decode_trace(value)
    assert caught.value.reason == (
        f"not a trace event: trace_id: String should have at most {MAX_TRACE_ID_CHARS} "
        "characters (1 problem(s))"
    )
