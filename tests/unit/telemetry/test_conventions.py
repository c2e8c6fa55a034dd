"""OpenInference and Langfuse traces -> what the judge reads: one table row per trace shape."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openinference.semconv.resource import ResourceAttributes
from openinference.semconv.trace import (
    OpenInferenceMimeTypeValues,
    RerankerAttributes,
    SpanAttributes,
    ToolAttributes,
)

from consumer.telemetry.conventions import (
    LANGFUSE_TRACE_INPUT,
    LANGFUSE_TRACE_OUTPUT,
    SERVICE_NAME,
    map_trace,
)
from consumer.telemetry.spans import Span
from tests.unit.telemetry.span_builder import (
    AGENT,
    CHAIN,
    DROPPED_ROOT,
    KIND,
    LLM,
    RERANKER,
    RETRIEVER,
    TOOL,
    check,
    documents,
    messages,
    output_tool_call,
    sid,
    span,
)

SA = SpanAttributes
IN, OUT = SA.LLM_INPUT_MESSAGES, SA.LLM_OUTPUT_MESSAGES
JSON_MIME = OpenInferenceMimeTypeValues.JSON.value
RESOURCE = {ResourceAttributes.PROJECT_NAME: "rag-prod", SERVICE_NAME: "rag-api"}


def llm(n: int, parent: int | str | None, question: str, answer: str | None, *, start: int,
        end: int, **extra: Any) -> Span:
    """An LLM span: a system prompt, the question, and the answer when given."""
    attributes = {KIND: LLM, **messages(IN, ("system", "Use the context."), ("user", question)),
                  **extra}
    if answer is not None:
        attributes |= messages(OUT, ("assistant", answer))
    return span(n, parent, attributes, start=start, end=end, resource=RESOURCE)


LLAMA_INDEX = [
    span(1, None, {KIND: CHAIN, SA.INPUT_VALUE: "Where is the Eiffel Tower?",
                   SA.OUTPUT_VALUE: "In Paris.", SA.SESSION_ID: "s-1"},
         start=0, end=100, resource=RESOURCE, name="RetrieverQueryEngine.query"),
    span(2, 1, {KIND: RETRIEVER, SA.INPUT_VALUE: "Where is the Eiffel Tower?",
                **documents(SA.RETRIEVAL_DOCUMENTS, "The tower is in Paris.", "It is iron.")},
         start=5, end=20, resource=RESOURCE),
    span(3, 1, {KIND: CHAIN}, start=25, end=95, resource=RESOURCE, name="synthesize"),
    llm(4, 3, "Where is the Eiffel Tower?", "In Paris.", start=30, end=90),
]

RERANKED = [
    span(1, None, {KIND: CHAIN, SA.INPUT_VALUE: "q", SA.OUTPUT_VALUE: "a"}, start=0, end=100),
    span(2, 1, {KIND: RETRIEVER, **documents(SA.RETRIEVAL_DOCUMENTS, "A", "B", "C")},
         start=5, end=10),
    span(3, 1, {KIND: RERANKER,
                **documents(RerankerAttributes.RERANKER_OUTPUT_DOCUMENTS, "C", "A")},
         start=11, end=15),
    llm(4, 1, "q", "a", start=20, end=90),
]

TOOLS = [
    span(1, None, {KIND: CHAIN, SA.INPUT_VALUE: "Weather in Paris?",
                   SA.OUTPUT_VALUE: "Sunny in Paris."}, start=0, end=100),
    llm(2, 1, "Weather in Paris?", None, start=5, end=20,
        **output_tool_call(0, 0, "get_weather", '{"city": "Paris"}', "call_1"),
        **{f"{SA.LLM_TOOLS}.0.{ToolAttributes.TOOL_JSON_SCHEMA}": json.dumps(
            {"type": "function", "function": {"name": "get_weather"}}),
           f"{SA.LLM_TOOLS}.1.{ToolAttributes.TOOL_JSON_SCHEMA}": json.dumps(
            {"name": "search_web"})}),
    span(3, 1, {KIND: TOOL, SA.TOOL_NAME: "get_weather", SA.TOOL_ID: "call_1",
                SA.INPUT_VALUE: '{"city": "Paris"}', SA.OUTPUT_VALUE: "sunny"},
         start=21, end=30),
    llm(4, 1, "Weather in Paris?", "Sunny in Paris.", start=31, end=90),
]

AGENT_TRACE = [
    span(1, None, {KIND: AGENT, SA.INPUT_VALUE: "Plan my trip", SA.OUTPUT_VALUE: "Go by train."},
         start=0, end=100),
    llm(2, 1, "Plan my trip", "Go by train.", start=5, end=90),
]

LANGCHAIN = [
    span(1, None, {KIND: CHAIN, SA.INPUT_VALUE: json.dumps({"input": "Who wrote Hamlet?"}),
                   SA.INPUT_MIME_TYPE: JSON_MIME,
                   SA.OUTPUT_VALUE: json.dumps({"input": "Who wrote Hamlet?",
                                                "context": ["..."],
                                                "answer": "Shakespeare."}),
                   SA.OUTPUT_MIME_TYPE: JSON_MIME}, start=0, end=100, name="RunnableSequence"),
    span(2, 1, {KIND: RETRIEVER,
                **documents(SA.RETRIEVAL_DOCUMENTS, "Hamlet is by Shakespeare.")},
         start=5, end=10, name="VectorStoreRetriever"),
    span(3, 1, {KIND: LLM, **messages(IN, ("system", "ctx"), ("user", "Who wrote Hamlet?")),
                **messages(OUT, ("assistant", "Shakespeare."))}, start=15, end=90,
         name="ChatOpenAI"),
]

# Only the openai client instrumented: the LLM span is the outermost, its output.value the
# raw API response (JSON with no answer key), its reply in multimodal content parts.
OPENAI_ONLY = [
    span(1, DROPPED_ROOT, {
        KIND: LLM, SA.OUTPUT_VALUE: json.dumps({"id": "chatcmpl-1", "choices": []}),
        SA.OUTPUT_MIME_TYPE: JSON_MIME, **messages(IN, ("user", "Hi?")),
        f"{OUT}.0.message.role": "assistant",
        f"{OUT}.0.message.contents.0.message_content.type": "text",
        f"{OUT}.0.message.contents.0.message_content.text": "Hello.",
    }, start=0, end=10),
]

# LlamaIndex's llm.complete called by hand after a retriever call (a real app's shape): no
# chain around them, the prompt in llm.prompts (an array), the reply only in output.value.
COMPLETION_AFTER_RETRIEVAL = [
    span(1, DROPPED_ROOT, {KIND: RETRIEVER, SA.INPUT_VALUE: "Who built it?",
                           **documents(SA.RETRIEVAL_DOCUMENTS, "Eiffel's company built it.")},
         start=0, end=10, resource=RESOURCE),
    span(2, DROPPED_ROOT, {KIND: LLM, SA.LLM_PROMPTS: ("Context: Eiffel's company built it.\n"
                                                       "Question: Who built it?",),
                           SA.INPUT_VALUE: json.dumps({"args": ["Context: ..."]}),
                           SA.INPUT_MIME_TYPE: JSON_MIME,
                           SA.OUTPUT_VALUE: "Gustave Eiffel's company."},
         start=11, end=30, resource=RESOURCE),
]

# The newer flattened form of the prompts, and no retriever: the prompt is the context.
COMPLETION_ONLY = [
    span(1, DROPPED_ROOT, {KIND: LLM, f"{SA.LLM_PROMPTS}.0.prompt.text": "Say hi to Ann.",
                           SA.OUTPUT_VALUE: "Hi Ann!"}, start=0, end=10),
]

OPENINFERENCE = [
    pytest.param(LLAMA_INDEX, {
        "answer": "In Paris.", "answer_span": sid(1), "input": "Where is the Eiffel Tower?",
        "docs": ("The tower is in Paris.", "It is iron."), "source": "retrieval",
        "project": "rag-prod", "session": "s-1", "agent": False, "tools": (),
    }, id="llama-index-chain-retriever-llm"),
    pytest.param(RERANKED, {"docs": ("C", "A"), "source": "retrieval"},
                 id="reranker-output-beats-retriever"),
    pytest.param(TOOLS, {
        "answer": "Sunny in Paris.",
        "tools": (("get_weather", '{"city": "Paris"}', "sunny"),),
        "available": ("get_weather", "search_web"), "agent": False,
    }, id="tool-span-and-model-request-are-one-call"),
    pytest.param(AGENT_TRACE, {"answer": "Go by train.", "agent": True, "available": ()},
                 id="agent"),
    pytest.param(LANGCHAIN, {
        "answer": "Shakespeare.", "input": "Who wrote Hamlet?",
        "docs": ("Hamlet is by Shakespeare.",), "project": None,
    }, id="langchain-json-values"),
    pytest.param(OPENAI_ONLY, {
        "answer": "Hello.", "answer_span": sid(1), "input": "Hi?", "source": "llm_input",
        "docs": ("Hi?",),
    }, id="openai-only-raw-response-falls-to-messages"),
    pytest.param(COMPLETION_AFTER_RETRIEVAL, {
        "answer": "Gustave Eiffel's company.", "answer_span": sid(2), "source": "retrieval",
        "docs": ("Eiffel's company built it.",),
        "input": "Context: Eiffel's company built it.\nQuestion: Who built it?",
    }, id="completion-call-after-a-retriever"),
    pytest.param(COMPLETION_ONLY, {
        "answer": "Hi Ann!", "answer_span": sid(1), "input": "Say hi to Ann.",
        "source": "llm_input", "docs": ("Say hi to Ann.",),
    }, id="completion-call-prompts-are-the-context"),
]


@pytest.mark.parametrize(("spans", "expected"), OPENINFERENCE)
def test_openinference(spans: list[Span], expected: dict[str, Any]) -> None:
    check(map_trace(spans), expected)


def _with(base: Span, **attributes: Any) -> Span:
    return Span(base.trace_id, base.span_id, base.parent_span_id, base.name,
                base.start_unix_nano, base.end_unix_nano,
                {**base.attributes, **attributes}, base.events, base.resource)


LANGFUSE = [
    pytest.param([_with(LLAMA_INDEX[0], **{LANGFUSE_TRACE_OUTPUT: json.dumps("Final."),
                                           LANGFUSE_TRACE_INPUT: json.dumps({"query": "Q?"})}),
                  *LLAMA_INDEX[1:]],
                 {"answer": "Final.", "answer_span": sid(1), "input": "Q?"},
                 id="override-on-root-json"),
    pytest.param([*LLAMA_INDEX[:3], _with(LLAMA_INDEX[3], **{LANGFUSE_TRACE_OUTPUT: "Plain."})],
                 {"answer": "Plain.", "answer_span": sid(4),
                  "input": "Where is the Eiffel Tower?"},
                 id="override-on-a-child-plain-text-beats-root-output"),
    pytest.param([_with(LLAMA_INDEX[0], **{LANGFUSE_TRACE_OUTPUT: json.dumps(
                    [{"role": "user", "content": "q"}, {"role": "assistant", "content": "M."}])}),
                  *LLAMA_INDEX[1:]],
                 {"answer": "M."}, id="override-as-chat-messages"),
]


@pytest.mark.parametrize(("spans", "expected"), LANGFUSE)
def test_langfuse_overrides(spans: list[Span], expected: dict[str, Any]) -> None:
    check(map_trace(spans), expected)


def test_project_falls_back_to_service_name() -> None:
    spans = [span(1, None, {KIND: LLM, **messages(OUT, ("assistant", "a"))}, start=0, end=1,
                  resource={SERVICE_NAME: "svc"})]
    check(map_trace(spans), {"project": "svc"})


def test_trace_event_carries_the_judged_fields() -> None:
    mapped = map_trace(LLAMA_INDEX)
    assert mapped is not None
    event = mapped.to_trace_event()
    assert event.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert (event.output, event.input, event.project_id) == (
        "In Paris.", "Where is the Eiffel Tower?", "rag-prod")
    assert [(d.content, d.id, d.metadata) for d in event.retrieved_documents or []] == [
        ("The tower is in Paris.", "d0", {"n": 0}), ("It is iron.", "d1", {"n": 1})]
    assert event.timestamp is None  # a start of 0 is no time


def test_trace_event_timestamp_is_the_first_span_start() -> None:
    spans = [span(1, None, {KIND: LLM, **messages(OUT, ("assistant", "a"))},
                  start=1_700_000_000_250_000_000, end=1_700_000_001_000_000_000)]
    mapped = map_trace(spans)
    assert mapped is not None
    assert mapped.to_trace_event().timestamp == "2023-11-14T22:13:20.250000Z"
