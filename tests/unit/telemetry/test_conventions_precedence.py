"""The contract's precedence between sources, the context fallback, and what is no candidate."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openinference.semconv.trace import (
    DocumentAttributes,
    OpenInferenceMimeTypeValues,
    RerankerAttributes,
    SpanAttributes,
)
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as published

from consumer.telemetry.conventions import map_trace
from consumer.telemetry.spans import Span
from tests.unit.telemetry.span_builder import (
    CHAIN,
    DROPPED_ROOT,
    EMBEDDING,
    KIND,
    LLM,
    RERANKER,
    RETRIEVER,
    check,
    documents,
    messages,
    sid,
    span,
)

SA = SpanAttributes
IN, OUT = SA.LLM_INPUT_MESSAGES, SA.LLM_OUTPUT_MESSAGES


def llm(n: int, parent: int | str | None, question: str, answer: str | None, *, start: int,
        end: int) -> Span:
    attributes = {KIND: LLM, **messages(IN, ("system", f"sys {n}"), ("user", question))}
    if answer is not None:
        attributes |= messages(OUT, ("assistant", answer))
    return span(n, parent, attributes, start=start, end=end)


def chain(n: int, parent: int | str | None, *, start: int, end: int, **values: str) -> Span:
    return span(n, parent, {KIND: CHAIN, **values}, start=start, end=end)


def retriever(n: int, parent: int, *contents: str, start: int, end: int) -> Span:
    return span(n, parent, {KIND: RETRIEVER, **documents(SA.RETRIEVAL_DOCUMENTS, *contents)},
                start=start, end=end)


PRECEDENCE = [
    pytest.param([chain(1, DROPPED_ROOT, start=0, end=100, **{SA.INPUT_VALUE: "Q?",
                                                             SA.OUTPUT_VALUE: "Root answer."}),
                  llm(2, 1, "inner q", "LLM answer.", start=10, end=90)],
                 {"answer": "Root answer.", "answer_span": sid(1), "input": "Q?"},
                 id="http-root-dropped-outermost-genai-span-answers"),
    pytest.param([chain(1, DROPPED_ROOT, start=0, end=5, **{SA.OUTPUT_VALUE: "3 documents"}),
                  llm(2, DROPPED_ROOT, "q", "LLM answer.", start=10, end=90)],
                 {"answer": "LLM answer.", "answer_span": sid(2), "input": "q"},
                 id="several-outermost-spans-llm-decides"),
    pytest.param([llm(1, DROPPED_ROOT, "first q", "late end", start=0, end=50),
                  llm(2, DROPPED_ROOT, "second q", "early end", start=10, end=30)],
                 {"answer": "late end", "answer_span": sid(1), "input": "first q"},
                 id="two-llm-spans-last-ending-answers-first-asks"),
    pytest.param([chain(1, None, start=0, end=100),
                  llm(2, 1, "q1", "draft", start=5, end=40),
                  llm(3, 1, "q2", None, start=50, end=90)],
                 {"answer": "draft", "answer_span": sid(2), "input": "q1"},
                 id="last-ending-llm-without-text-is-passed-over"),
    pytest.param([chain(1, None, start=0, end=100, **{SA.INPUT_VALUE: "Q?"}),
                  llm(2, 1, "q", "Streamed.", start=5, end=90)],
                 {"answer": "Streamed.", "answer_span": sid(2), "input": "Q?"},
                 id="streaming-root-without-output-value"),
    pytest.param([chain(1, None, start=0, end=100, **{
                     SA.OUTPUT_VALUE: json.dumps({"a": 1, "b": 2}),
                     SA.OUTPUT_MIME_TYPE: OpenInferenceMimeTypeValues.JSON.value}),
                  llm(2, 1, "q", "From LLM.", start=5, end=90)],
                 {"answer": "From LLM.", "answer_span": sid(2)},
                 id="root-json-without-answer-key"),
    pytest.param([chain(1, None, start=0, end=100, **{SA.OUTPUT_VALUE: "a"}),
                  retriever(2, 1, "R1", "R2", start=1, end=2),
                  span(3, 1, {KIND: RERANKER}, start=3, end=4),
                  llm(4, 1, "q", "a", start=5, end=90)],
                 {"docs": ("R1", "R2"), "source": "retrieval"},
                 id="reranker-without-documents-leaves-retrievers"),
    pytest.param([chain(1, None, start=0, end=100, **{SA.OUTPUT_VALUE: "a"}),
                  span(2, 1, {KIND: RERANKER, **documents(
                      RerankerAttributes.RERANKER_OUTPUT_DOCUMENTS, "first")}, start=1, end=2),
                  span(3, 1, {KIND: RERANKER, **documents(
                      RerankerAttributes.RERANKER_OUTPUT_DOCUMENTS, "last")}, start=3, end=4),
                  llm(4, 1, "q", "a", start=5, end=90)],
                 {"docs": ("last",)}, id="last-reranker-wins"),
    pytest.param([chain(1, None, start=0, end=100, **{SA.OUTPUT_VALUE: "a"}),
                  retriever(3, 1, "second", start=20, end=30),
                  retriever(2, 1, "first", start=10, end=40),
                  llm(4, 1, "q", "a", start=50, end=90)],
                 {"docs": ("first", "second")}, id="retrievers-in-start-order"),
]

FALLBACK = [
    pytest.param([chain(1, None, start=0, end=100, **{SA.OUTPUT_VALUE: "Root."}),
                  llm(2, 1, "q2", "x", start=5, end=30),
                  llm(3, 1, "q3", "y", start=40, end=90)],
                 {"answer": "Root.", "source": "llm_input", "docs": ("sys 3", "q3")},
                 id="answer-from-root-context-from-last-ending-llm"),
    pytest.param([llm(1, None, "q", "a", start=0, end=9)],
                 {"source": "llm_input", "docs": ("sys 1", "q")},
                 id="no-retriever-system-and-user-messages"),
    pytest.param([chain(1, None, start=0, end=100, **{SA.OUTPUT_VALUE: "a"}),
                  span(2, 1, {KIND: RETRIEVER, f"{SA.RETRIEVAL_DOCUMENTS}.0."
                              f"{DocumentAttributes.DOCUMENT_ID}": "only-an-id"}, start=1, end=2),
                  llm(3, 1, "q", "a", start=5, end=90)],
                 {"source": "llm_input", "docs": ("sys 3", "q")},
                 id="retrieved-documents-without-text"),
]


@pytest.mark.parametrize(("spans", "expected"), [*PRECEDENCE, *FALLBACK])
def test_precedence_and_fallback(spans: list[Span], expected: dict[str, Any]) -> None:
    check(map_trace(spans), expected)


# 2 kB of brackets: json.loads raises RecursionError, not ValueError. Any application writes
# these attributes, so such a value is read as not JSON and the trace still maps.
DEEP = "[" * 2_000
JSON_MIME = {SA.OUTPUT_MIME_TYPE: OpenInferenceMimeTypeValues.JSON.value}

TOO_DEEP = [
    pytest.param([chain(1, None, start=0, end=100, **{SA.OUTPUT_VALUE: DEEP}, **JSON_MIME),
                  llm(2, 1, "q", "From LLM.", start=5, end=90)],
                 {"answer": DEEP, "answer_span": sid(1)}, id="output-value-labelled-json"),
    pytest.param([chain(1, None, start=0, end=100, **{SA.OUTPUT_VALUE: DEEP}),
                  llm(2, 1, "q", "From LLM.", start=5, end=90)],
                 {"answer": DEEP, "answer_span": sid(1)}, id="output-value-looking-like-json"),
    pytest.param([span(1, None, {KIND: LLM, published.GEN_AI_OUTPUT_MESSAGES: DEEP,
                                 **messages(OUT, ("assistant", "Paris."))}, start=0, end=9)],
                 {"answer": "Paris.", "answer_span": sid(1)}, id="genai-output-messages"),
    pytest.param([chain(1, None, start=0, end=100, **{SA.OUTPUT_VALUE: "a"}),
                  span(2, 1, {KIND: RETRIEVER, **documents(SA.RETRIEVAL_DOCUMENTS, "Doc."),
                              f"{SA.RETRIEVAL_DOCUMENTS}.0.{DocumentAttributes.DOCUMENT_METADATA}":
                              DEEP}, start=1, end=2),
                  llm(3, 1, "q", "a", start=5, end=90)],
                 {"docs": ("Doc.",), "source": "retrieval"}, id="document-metadata"),
]


@pytest.mark.parametrize(("spans", "expected"), TOO_DEEP)
def test_json_nested_too_deep_to_parse_is_read_as_not_json(
    spans: list[Span], expected: dict[str, Any]
) -> None:
    check(map_trace(spans), expected)



NOT_CANDIDATES = [
    pytest.param([], id="no-spans"),
    pytest.param([span(1, None, {"http.route": "/ask"}, start=0, end=5)], id="no-genai-span"),
    pytest.param([chain(1, None, start=0, end=100, **{SA.INPUT_VALUE: "docs/"}),
                  span(2, 1, {KIND: CHAIN}, start=1, end=10, name="SentenceSplitter"),
                  span(3, 1, {KIND: EMBEDDING}, start=11, end=90, name="OpenAIEmbedding")],
                 id="indexing-splitter-and-embedding"),
    pytest.param([span(1, None, {published.GEN_AI_OPERATION_NAME: "embeddings"}, start=0, end=5)],
                 id="genai-embeddings-only"),
    pytest.param([chain(1, None, start=0, end=100, **{SA.OUTPUT_VALUE: "an answer"})],
                 id="answer-without-documents-or-llm"),
]


@pytest.mark.parametrize("spans", NOT_CANDIDATES)
def test_not_candidates(spans: list[Span]) -> None:
    assert map_trace(spans) is None


def test_answer_with_documents_and_no_llm_is_a_candidate() -> None:
    spans = [chain(1, None, start=0, end=100, **{SA.OUTPUT_VALUE: "An answer."}),
             retriever(2, 1, "Doc.", start=1, end=2)]
    check(map_trace(spans), {"answer": "An answer.", "docs": ("Doc.",), "source": "retrieval"})


EMPTY_ANSWERS = [  # (spans, answer_found: some place held an answer, blank or not text)
    pytest.param([llm(1, None, "q", None, start=0, end=5)], False, id="llm-without-output"),
    pytest.param([span(1, None, {KIND: LLM, f"{OUT}.0.message.content": ("a", "b"),
                                 published.GEN_AI_OUTPUT_MESSAGES: "not json",
                                 f"{OUT}.x.message.content": "bad index",
                                 f"{OUT}.².message.content": "unicode digit"},
                  start=0, end=5)], True, id="attributes-of-the-wrong-type"),
    pytest.param([llm(1, None, "q", "   ", start=0, end=5)], True, id="whitespace-answer"),
    pytest.param([chain(1, None, start=0, end=100, **{SA.OUTPUT_VALUE: "Obj(result=1)"}),
                  llm(2, 1, "q", None, start=1, end=50)], True, id="outermost-value-a-repr"),
    pytest.param([span(1, None, {published.GEN_AI_OPERATION_NAME: "chat",
                                 f"{published.GEN_AI_COMPLETION}.0.content": ""},
                  start=0, end=5)], True, id="older-completion-blank"),
]


@pytest.mark.parametrize(("spans", "answer_found"), EMPTY_ANSWERS)
def test_candidate_with_empty_answer_is_returned_empty(spans: list[Span],
                                                       answer_found: bool) -> None:
    mapped = map_trace(spans)
    assert mapped is not None
    assert (mapped.answer.strip(), mapped.answer_span_id, mapped.has_answer) == ("", None, False)
    assert mapped.answer_found is answer_found
