"""Documents from every retriever convention that carries text, and which steps are not
retrievers: OpenLLMetry's outputs (the shapes its LangChain callback handler, its LlamaIndex
dispatcher and the SDK's ``@task`` decorator write), the GenAI ``retrieval`` operation's
``gen_ai.retrieval.documents`` with content; retriever documents win over the LLM input."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openinference.semconv.trace import SpanAttributes
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as published

from consumer.telemetry import genai, openllmetry
from consumer.telemetry.conventions import map_trace
from consumer.telemetry.spans import Span
from tests.unit.telemetry.span_builder import (
    DROPPED_ROOT,
    KIND,
    RERANKER,
    RETRIEVER,
    check,
    documents,
    sid,
    span,
)

OP = published.GEN_AI_OPERATION_NAME
DOC_A = "Refunds are accepted within 30 days of purchase."
DOC_B = "Shipping is free above 50 EUR."
PROMPT_DOCS = f"Use the context:\n{DOC_A}\n{DOC_B}"
QUESTION = "What is the refund window?"
ANSWER = "30 days."


def chat(n: int, parent: int | str, *, start: int, end: int) -> Span:
    """OpenLLMetry's chat span: the documents pasted into the system prompt."""
    return span(n, parent, {
        OP: "chat", "gen_ai.provider.name": "openai", "traceloop.span.kind": "llm",
        published.GEN_AI_INPUT_MESSAGES: json.dumps([
            {"role": "system", "parts": [{"type": "text", "content": PROMPT_DOCS}]},
            {"role": "user", "parts": [{"type": "text", "content": QUESTION}]}]),
        published.GEN_AI_OUTPUT_MESSAGES: json.dumps([
            {"role": "assistant", "parts": [{"type": "text", "content": ANSWER}],
             "finish_reason": "stop"}]),
    }, start=start, end=end, name="ChatOpenAI.chat")


def task(n: int, parent: int | str, name: str, output: Any, *, start: int, end: int,
         kind: str = "task", **extra: Any) -> Span:
    """An OpenLLMetry step: its output as JSON in both attributes, as LangChain's writes."""
    encoded = output if isinstance(output, str) else json.dumps(output)
    return span(n, parent, {
        "traceloop.span.kind": kind, "traceloop.entity.name": name,
        "traceloop.entity.output": encoded, "gen_ai.task.output": encoded, **extra,
    }, start=start, end=end, name=f"{name}.{kind}")


def lc_document(content: str, source: str) -> dict[str, Any]:
    """A LangChain ``Document`` as ``Serializable.to_json`` writes it."""
    return {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "document", "Document"],
            "kwargs": {"page_content": content, "metadata": {"source": source},
                       "type": "Document"}}


def workflow(n: int, output: Any, *, end: int = 100) -> Span:
    return task(n, DROPPED_ROOT, "RunnableSequence", {"outputs": output, "kwargs": {}},
                start=0, end=end, kind="workflow")


# The LangChain retriever span (callback handler's on_retriever_end, 2026).
LANGCHAIN_RETRIEVER = [
    workflow(1, ANSWER),
    task(2, 1, "VectorStoreRetriever", {
        "documents": [{"page_content": DOC_A, "metadata": {"source": "refunds.md"}},
                      {"page_content": DOC_B, "metadata": {"source": "shipping.md"}}],
        "count": 2,
    }, start=1, end=5, **{OP: openllmetry.VECTOR_DB_RETRIEVE, "gen_ai.provider.name": "langchain"}),
    # The chain around it hands the same documents up: not read twice.
    task(3, 1, "RunnableParallel<context,question>",
         {"outputs": {"context": [lc_document(DOC_A, "refunds.md")], "question": QUESTION},
          "kwargs": {}}, start=1, end=6),
    chat(4, 1, start=7, end=90),
]

# A chain that returned the retriever's documents (no retriever span of its own), nested.
LANGCHAIN_CHAIN = [
    workflow(1, ANSWER),
    task(2, 1, "retrieve_documents",
         {"outputs": [lc_document(DOC_A, "refunds.md"), lc_document(DOC_B, "shipping.md")],
          "kwargs": {"tags": []}}, start=1, end=6),
    task(3, 2, "RunnableLambda",
         {"outputs": [lc_document(DOC_A, "refunds.md"), lc_document(DOC_B, "shipping.md")],
          "kwargs": {}}, start=2, end=5),
    chat(4, 1, start=7, end=90),
]

# LlamaIndex's dispatcher: each NodeWithScore as to_json's text.
LLAMAINDEX = [
    task(1, DROPPED_ROOT, "RetrieverQueryEngine.workflow", {"response": ANSWER},
         start=0, end=100, kind="workflow"),
    task(2, 1, "VectorIndexRetriever.task", [
        json.dumps({"node": {"id_": "n1", "text": DOC_A, "metadata": {"file": "refunds.md"},
                             "class_name": "TextNode"}, "score": 0.82,
                    "class_name": "NodeWithScore"}),
        json.dumps({"node": {"id_": "n2", "text": DOC_B, "metadata": {}}, "score": 0.4}),
    ], start=1, end=5),
    chat(3, 1, start=6, end=90),
]

# The SDK's @task decorator: what the function returned.
DECORATED = [
    task(1, DROPPED_ROOT, "rag", ANSWER, start=0, end=100, kind="workflow"),
    task(2, 1, "retrieve", [DOC_A, DOC_B], start=1, end=5),
    chat(3, 1, start=6, end=90),
]

# The GenAI retrieval operation with content in its (open) document objects.
GENAI_RETRIEVAL = [
    span(1, DROPPED_ROOT, {
        OP: "retrieval", "gen_ai.data_source.id": "kb",
        "gen_ai.retrieval.query.text": QUESTION,
        genai.GEN_AI_RETRIEVAL_DOCUMENTS: json.dumps([
            {"id": "doc_1", "score": 0.95, "content": DOC_A},
            {"id": "doc_2", "score": 0.5}]),  # an id alone: nothing to read
    }, start=0, end=5, name="retrieval kb"),
    span(2, DROPPED_ROOT, {
        OP: "retrieval", genai.GEN_AI_RETRIEVAL_DOCUMENTS: (
            {"id": "doc_3", "content": DOC_B, "metadata": {"source": "shipping.md"}},),
    }, start=6, end=8, name="retrieval kb"),  # structured: an OTLP array of key-value lists
    chat(3, DROPPED_ROOT, start=9, end=90),
]

RETRIEVED = [
    pytest.param(LANGCHAIN_RETRIEVER, {"source": "retrieval", "docs": (DOC_A, DOC_B),
                                       "answer": ANSWER, "answer_span": sid(4)},
                 id="openllmetry-langchain-retriever-span"),
    pytest.param(LANGCHAIN_CHAIN, {"source": "retrieval", "docs": (DOC_A, DOC_B)},
                 id="openllmetry-langchain-chain-of-documents-each-once"),
    pytest.param(LLAMAINDEX, {"source": "retrieval", "docs": (DOC_A, DOC_B)},
                 id="openllmetry-llamaindex-nodes-with-score"),
    pytest.param(DECORATED, {"source": "retrieval", "docs": (DOC_A, DOC_B)},
                 id="openllmetry-decorated-retrieve-task-of-strings"),
    pytest.param(GENAI_RETRIEVAL, {"source": "retrieval", "docs": (DOC_A, DOC_B)},
                 id="genai-retrieval-documents-with-content"),
    pytest.param([task(1, DROPPED_ROOT, "load_faq", [{"page_content": DOC_A}], start=0, end=5),
                  chat(2, DROPPED_ROOT, start=6, end=90)],
                 {"source": "retrieval", "docs": (DOC_A,)},
                 id="langchain-documents-from-any-step-name"),
]


@pytest.mark.parametrize(("spans", "expected"), RETRIEVED)
def test_retriever_documents_win_over_the_llm_input(
    spans: list[Span], expected: dict[str, Any]
) -> None:
    check(map_trace(spans), expected)


NOT_DOCUMENTS = [
    pytest.param(task(1, DROPPED_ROOT, "format_prompt", ["Use the context", QUESTION],
                      start=0, end=5), id="strings-from-a-step-not-named-for-retrieval"),
    pytest.param(task(1, DROPPED_ROOT, "split", [{"text": DOC_A}, {"text": DOC_B}],
                      start=0, end=5), id="text-chunks-from-a-step-not-named-for-retrieval"),
    pytest.param(task(1, DROPPED_ROOT, "search_history",
                      [{"role": "user", "content": "Earlier question?"}], start=0, end=5),
                 id="messages-even-from-a-search-step"),
    pytest.param(task(1, DROPPED_ROOT, "load", [{"page_content": DOC_A}, "a note"],
                      start=0, end=5), id="a-list-only-partly-documents"),
    pytest.param(task(1, DROPPED_ROOT, "retrieve", '{"documents": [', start=0, end=5),
                 id="output-cut-mid-json"),
    pytest.param(task(1, DROPPED_ROOT, "retrieve", {"answer": "x", "context": "y"},
                      start=0, end=5), id="an-object-with-no-list"),
    pytest.param(span(1, DROPPED_ROOT, {"traceloop.entity.name": "retrieve",
                                        "traceloop.entity.output": json.dumps([DOC_A])},
                      start=0, end=5), id="no-traceloop-span-kind"),
]


@pytest.mark.parametrize("step", NOT_DOCUMENTS)
def test_task_outputs_that_are_not_documents_leave_the_llm_input_as_context(step: Span) -> None:
    check(map_trace([step, chat(2, DROPPED_ROOT, start=6, end=90)]),
          {"source": "llm_input", "docs": (PROMPT_DOCS, QUESTION)})


@pytest.mark.parametrize("retriever", [
    pytest.param(span(2, DROPPED_ROOT, {
        KIND: RETRIEVER, **documents(SpanAttributes.RETRIEVAL_DOCUMENTS, DOC_A)},
        start=6, end=8), id="openinference-retriever"),
    pytest.param(task(2, DROPPED_ROOT, "EnsembleKB", {"documents": [{"page_content": DOC_A}]},
                      start=6, end=8, **{OP: openllmetry.VECTOR_DB_RETRIEVE}),
                 id="openllmetry-retriever-span-of-any-name"),
])
def test_a_retriever_span_with_text_outranks_document_shaped_steps(retriever: Span) -> None:
    """An explicit retriever decides; a step's other documents are not added to its."""
    spans = [task(1, DROPPED_ROOT, "load_faq", [{"page_content": DOC_B}], start=0, end=5),
             retriever, chat(3, DROPPED_ROOT, start=9, end=90)]
    check(map_trace(spans), {"source": "retrieval", "docs": (DOC_A,)})


def test_the_last_reranker_still_decides() -> None:
    spans = [*LANGCHAIN_RETRIEVER[:2],
             span(5, 1, {KIND: RERANKER, **documents("reranker.input_documents", DOC_A, DOC_B),
                         **documents("reranker.output_documents", DOC_B)}, start=6, end=7),
             LANGCHAIN_RETRIEVER[3]]
    check(map_trace(spans), {"source": "retrieval", "docs": (DOC_B,)})


def test_document_fields_come_through() -> None:
    mapped = map_trace(LLAMAINDEX)
    assert mapped is not None
    first = mapped.documents[0]
    assert (first.id, first.metadata) == ("n1", {"file": "refunds.md", "score": 0.82})
    mapped = map_trace(GENAI_RETRIEVAL)
    assert mapped is not None
    assert [(d.id, d.metadata) for d in mapped.documents] == [
        ("doc_1", {"score": 0.95}), ("doc_3", {"source": "shipping.md"})]
    mapped = map_trace(LANGCHAIN_CHAIN)
    assert mapped is not None
    assert [d.metadata for d in mapped.documents] == [{"source": "refunds.md"},
                                                      {"source": "shipping.md"}]


@pytest.mark.parametrize(("name", "retrieval"), [
    ("VectorStoreRetriever", True), ("retrieve", True), ("search_docs", True),
    ("VectorIndexRetriever.task", True), ("fetch_documents", True), ("kb_lookup", True),
    ("format_docs_prompt", True),  # names docs: its list output would count, a string not
    ("summarize_document", False), ("ChatPromptTemplate", False), ("RunnableSequence", False),
])
def test_which_names_say_retrieval(name: str, retrieval: bool) -> None:
    step = span(1, None, {"traceloop.span.kind": "task", "traceloop.entity.name": name},
                start=0, end=1)
    assert openllmetry.names_retrieval(step) is retrieval


def test_the_names_are_openllmetrys() -> None:
    """As ``opentelemetry-semantic-conventions-ai`` spells them (SpanAttributes), and
    the GenAI name as the published constant."""
    assert (openllmetry.TRACELOOP_SPAN_KIND, openllmetry.TRACELOOP_ENTITY_NAME,
            openllmetry.TRACELOOP_ENTITY_OUTPUT, openllmetry.GEN_AI_TASK_OUTPUT) == (
        "traceloop.span.kind", "traceloop.entity.name", "traceloop.entity.output",
        "gen_ai.task.output")
    assert genai.GEN_AI_RETRIEVAL_DOCUMENTS == published.GEN_AI_RETRIEVAL_DOCUMENTS
