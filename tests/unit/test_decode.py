"""Record bytes -> TraceEvent, and every way a record can be malformed."""

from __future__ import annotations

import json

import pytest

from consumer.decode import decode_trace
from consumer.errors import DecodeError


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
        pytest.param(b'{"trace_id": 7}', "valid string", id="numeric-trace-id"),
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
