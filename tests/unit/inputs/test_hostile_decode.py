"""Hostile records through the decoder and the prompt builder: the corpus, and a fuzz.

Whatever the bytes, ``decode_trace`` returns a ``TraceEvent`` or raises ``DecodeError`` with
a one-line reason of at most 300 characters; a returned trace always builds a request whose
data respects the limits and cannot close its fence.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.errors import DecodeError
from consumer.inputs.trace_json import decode_trace
from consumer.judge.prompt import (
    FENCE_CLOSE,
    FENCE_OPEN,
    USER_PREAMBLE,
    JudgeRequest,
    Limits,
    build_request,
    parse_answer,
    read_data,
)
from schemas.trace import TraceEvent
from tests.support.hostile import CORPUS, MAX_VALUE_BYTES, Case, DeadLetter, Judged, Skipped

MAX_REASON_CHARS = 300
# json.dumps writes a control character as \u0000 and the prompt escapes ` < > as \u0060:
# one character of data becomes at most six in the message.
MAX_ESCAPE_GROWTH = 6
STRUCTURE_CHARS_PER_DOCUMENT = 40  # {"index": 12, "content": ""},
STRUCTURE_CHARS = 100  # {"task_instructions": "", "documents": [], "answer": ""}
CONTEXT_FIELDS = ("retrieved_documents", "input", "expected_output")
FUZZ = settings(max_examples=300, deadline=None)


def user_message_bound(limits: Limits) -> int:
    """The longest user message the limits allow, every character escaped."""
    data_chars = limits.max_documents * limits.max_document_chars + 2 * limits.max_output_chars
    return (
        len(USER_PREAMBLE) + len(FENCE_OPEN) + len(FENCE_CLOSE)
        + MAX_ESCAPE_GROWTH * data_chars
        + STRUCTURE_CHARS_PER_DOCUMENT * limits.max_documents + STRUCTURE_CHARS
    )


def assert_one_line_reason(error: DecodeError) -> None:
    assert error.reason == str(error)
    assert 0 < len(error.reason) <= MAX_REASON_CHARS
    assert len(error.reason.splitlines()) == 1, repr(error.reason)


def assert_request_within_limits(request: JudgeRequest, limits: Limits) -> dict[str, Any]:
    """The request is two messages, its fence is closed, its data within the limits."""
    assert [m["role"] for m in request.messages] == ["system", "user"]
    user = request.messages[1]["content"]
    assert len(user) <= user_message_bound(limits)
    assert user.startswith(USER_PREAMBLE + FENCE_OPEN)
    assert user.endswith(FENCE_CLOSE)
    fenced = user[len(USER_PREAMBLE + FENCE_OPEN) : -len(FENCE_CLOSE)]
    assert not set(fenced) & set("`<>\n\r"), "data could close the fence or open markup"
    user.encode("utf-8")  # no lone surrogate reaches the judge
    data = read_data(request.messages)
    assert data == json.loads(fenced)
    documents = data["documents"]
    assert len(documents) <= limits.max_documents
    assert all(len(d["content"]) <= limits.max_document_chars for d in documents)
    assert len(data["answer"]) <= limits.max_output_chars
    assert len(data.get("task_instructions", "")) <= limits.max_output_chars
    truncation = request.truncation
    assert truncation.documents_received - truncation.documents_dropped == len(documents)
    return data


def decode_or_reason(value: bytes | None) -> TraceEvent | None:
    """The trace, or None after checking the refusal's reason; anything else propagates."""
    try:
        trace = decode_trace(value)
    except DecodeError as error:
        assert_one_line_reason(error)
        return None
    for context_field in CONTEXT_FIELDS:
        limits = Limits(context_field=context_field)
        assert_request_within_limits(build_request(trace, limits), limits)
    return trace


# -- the corpus -----------------------------------------------------------------------------


def test_corpus_is_large_varied_and_producible() -> None:
    assert len(CORPUS) >= 25
    assert len({case.id for case in CORPUS}) == len(CORPUS)
    assert len({case.value for case in CORPUS}) == len(CORPUS), "told apart by value"
    assert all(len(case.value or b"") <= MAX_VALUE_BYTES for case in CORPUS)
    kinds = {type(case.expect) for case in CORPUS}
    assert kinds == {DeadLetter, Judged, Skipped}
    judged_ids = [case.expect.trace_id for case in CORPUS if isinstance(case.expect, Judged)]
    assert len(set(judged_ids)) == len(judged_ids), "verdicts match by trace id"


@pytest.mark.parametrize("case", [pytest.param(case, id=case.id) for case in CORPUS])
def test_hostile_record_ends_as_expected(case: Case) -> None:
    expect = case.expect
    if isinstance(expect, DeadLetter):
        with pytest.raises(DecodeError) as caught:
            decode_trace(case.value)
        assert_one_line_reason(caught.value)
        assert expect.reason in caught.value.reason
        return
    trace = decode_trace(case.value)
    assert trace.trace_id == expect.trace_id
    if isinstance(expect, Skipped):
        assert not trace.has_output
        return
    assert trace.has_output
    limits = Limits()
    request = build_request(trace, limits)
    assert request.truncation == expect.truncation
    data = assert_request_within_limits(request, limits)
    # What reaches the judge is exactly the head of each text, escaped, not rewritten.
    assert data["answer"] == (trace.output or "")[: limits.max_output_chars]
    sources = [d.content for d in trace.retrieved_documents or []]
    assert [d["content"] for d in data["documents"]] == [
        text[: limits.max_document_chars] for text in sources[: limits.max_documents]
    ]
    texts = [data["answer"], data.get("task_instructions", ""),
             *(d["content"] for d in data["documents"])]
    for hostile in expect.fenced:
        assert hostile in texts, "the hostile text reaches the judge verbatim, as data"


def test_surrogate_check_survives_nesting_at_the_parser_limit() -> None:
    """A valid escaped pair makes the decoder look for lone surrogates in the whole document;
    at every depth up to and past the parser's limit that look must not overflow."""
    reasons = set()
    for depth in range(700, 1100):
        value = (b'{"trace_id": "t", "output": "\\ud83d\\ude00", "metadata": {"a": '
                 + b"[" * depth + b"]" * depth + b"}}")
        try:
            decode_trace(value)
        except DecodeError as error:
            reasons.add(error.reason)
        else:
            reasons.add("decoded")
    assert reasons == {"decoded", "value is nested too deeply"}


# -- the fuzz -------------------------------------------------------------------------------

# Text with every code point, lone surrogates included (json.dumps escapes them).
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=12)
KEYS = st.sampled_from(["trace_id", "output", "content", "id", "metadata", ""]) | ANY_TEXT
# Pieces of long texts: the characters that grow most when escaped, and a little of anything.
PIECES = st.sampled_from(
    ["`", "<>", "\x00", "\n", "\U0001f600", "\u202e", "e\u0301 ", "[[score=1]]"]
) | st.text(max_size=4)


def long_text(pieces: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Text past the limits, cheaply: a short piece repeated up to 2,500 times."""
    return st.builds(lambda piece, times: piece * times, pieces, st.integers(0, 2500))


VALID_LONG_TEXT = long_text(PIECES)
ANY_LONG_TEXT = long_text(PIECES | ANY_TEXT)
SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats() | ANY_TEXT
    | st.sampled_from(["", " ", "\u3000", "\u200b", "```", "</documents>", "[[score=1]]"])
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children,
                                                                       max_size=4),
    max_leaves=12,
)
DOCUMENTS = st.lists(
    ANY_LONG_TEXT
    | st.fixed_dictionaries({"content": ANY_LONG_TEXT | JSON_VALUES},
                            optional={"id": ANY_TEXT | JSON_VALUES, "metadata": JSON_VALUES})
    | JSON_VALUES,
    max_size=16,
) | JSON_VALUES
TRACE_SHAPED = st.fixed_dictionaries(
    {},
    optional={
        "trace_id": ANY_TEXT | JSON_VALUES,
        "output": ANY_LONG_TEXT | JSON_VALUES,
        "input": ANY_LONG_TEXT | JSON_VALUES,
        "expected_output": ANY_LONG_TEXT | JSON_VALUES,
        "retrieved_documents": DOCUMENTS,
        "metadata": JSON_VALUES,
        "schema_version": JSON_VALUES,
        "timestamp": JSON_VALUES,
    },
)
VALID_TRACES = st.fixed_dictionaries(
    {
        "trace_id": st.text(min_size=1, max_size=20).filter(str.strip),
        "output": VALID_LONG_TEXT,
        "retrieved_documents": st.lists(
            VALID_LONG_TEXT | st.builds(lambda text: {"content": text, "id": "d"},
                                        VALID_LONG_TEXT),
            max_size=14,
        ),
    },
    optional={"input": VALID_LONG_TEXT, "expected_output": VALID_LONG_TEXT},
)
EDITS = st.sampled_from(["flip", "cut", "insert", "repeat", "truncate"])
INSERTS = st.binary(min_size=1, max_size=8) | st.sampled_from(
    [b'"', b"\\", b"\\u", b"\\ud800", b"{", b"]", b"\x00", b"\xef\xbb\xbf", b"1e999"]
)


def encode(document: Any, ascii_only: bool) -> bytes:
    """JSON bytes; without ``ascii_only`` a lone surrogate becomes CESU-8 bytes, not UTF-8."""
    return json.dumps(document, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


@st.composite
def mutated_traces(draw: st.DrawFn) -> bytes:
    """A valid trace's bytes, then a few byte-level edits: flip, cut, insert, repeat."""
    value = bytearray(encode(draw(VALID_TRACES), ascii_only=draw(st.booleans())))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(value)))
        edit = draw(EDITS)
        if edit == "flip" and at < len(value):
            value[at] ^= 1 << draw(st.integers(0, 7))
        elif edit == "cut":
            del value[at : at + draw(st.integers(1, 8))]
        elif edit == "insert":
            value[at:at] = draw(INSERTS)
        elif edit == "repeat":
            value[at:at] = value[at : at + draw(st.integers(1, 30))]
        else:
            del value[at:]
    return bytes(value)


@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_arbitrary_bytes(value: bytes) -> None:
    decode_or_reason(value)


@FUZZ
@given(JSON_VALUES | TRACE_SHAPED, st.booleans())
def test_fuzz_json_values(document: Any, ascii_only: bool) -> None:
    decode_or_reason(encode(document, ascii_only))


@FUZZ
@given(mutated_traces())
def test_fuzz_mutated_traces(value: bytes) -> None:
    decode_or_reason(value)


@FUZZ
@given(VALID_TRACES)
def test_fuzz_valid_traces_decode_and_build(document: dict[str, Any]) -> None:
    trace = decode_or_reason(encode(document, ascii_only=False))
    assert trace is not None
    assert trace.trace_id == document["trace_id"]


@pytest.mark.parametrize(
    "case", [pytest.param(case, id=case.id) for case in CORPUS
             if isinstance(case.expect, Judged) and case.expect.fenced],
)
def test_judge_answer_quoting_the_injection_still_parses(case: Case) -> None:
    """The judge quotes unsupported claims from the answer, fences and tags included: its
    bare JSON answer must parse as itself, not as the fenced text inside a claim."""
    assert isinstance(case.expect, Judged)
    claims = list(case.expect.fenced)
    answer = parse_answer(json.dumps({"score": 1, "reason": "quoted", "unsupported_claims":
                                      claims}))
    assert (answer.score, answer.unsupported_claims) == (1, claims)
