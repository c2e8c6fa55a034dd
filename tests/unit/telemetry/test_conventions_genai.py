"""OTel GenAI traces -> what the judge reads: one table row per trace shape; the names the
mapper writes out are checked against the published (incubating) constants."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openinference.semconv.trace import SpanAttributes
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as published

from consumer.telemetry import genai
from consumer.telemetry.conventions import map_trace
from consumer.telemetry.spans import Span, SpanEvent
from tests.unit.telemetry.span_builder import DROPPED_ROOT, check, documents, sid, span

OP = published.GEN_AI_OPERATION_NAME
Ops = published.GenAiOperationNameValues


def parts(role: str, *texts: str, **extra: Any) -> dict[str, Any]:
    """One 1.37+ message: ``{"role", "parts": [{"type": "text", "content"}]}``."""
    return {"role": role, "parts": [{"type": "text", "content": t} for t in texts], **extra}


def chat(n: int, parent: int | str | None, *, start: int, end: int, question: str,
         answer: str | None, **extra: Any) -> Span:
    """A chat span with JSON input and output messages."""
    attributes = {
        OP: Ops.CHAT.value,
        published.GEN_AI_SYSTEM_INSTRUCTIONS: json.dumps(
            [{"type": "text", "content": "Be brief."}]),
        published.GEN_AI_INPUT_MESSAGES: json.dumps([parts("user", question)]),
        **extra,
    }
    if answer is not None:
        attributes[published.GEN_AI_OUTPUT_MESSAGES] = json.dumps([parts("assistant", answer)])
    return span(n, parent, attributes, start=start, end=end, name="chat gpt-4o")


CHAT_JSON = [chat(1, DROPPED_ROOT, start=0, end=10, question="Capital of France?",
                  answer="Paris.")]

RETRIEVAL = [
    span(1, DROPPED_ROOT, {OP: Ops.RETRIEVAL.value, published.GEN_AI_RETRIEVAL_DOCUMENTS:
                           json.dumps([{"id": "doc-1", "score": 0.9}])}, start=0, end=5),
    chat(2, DROPPED_ROOT, start=6, end=20, question="Q?", answer="A."),
]

RETRIEVAL_WITH_TEXT = [
    span(1, DROPPED_ROOT, {OP: Ops.RETRIEVAL.value,
                           **documents(SpanAttributes.RETRIEVAL_DOCUMENTS, "Doc text.")},
         start=0, end=5),
    chat(2, DROPPED_ROOT, start=6, end=20, question="Q?", answer="A."),
]

TOOL_CALL_PART = {"type": "tool_call", "id": "c1", "name": "get_weather",
                  "arguments": {"city": "Paris"}}
EXECUTE_TOOL = [
    span(1, None, {OP: Ops.INVOKE_AGENT.value, published.GEN_AI_CONVERSATION_ID: "conv-1"},
         start=0, end=100, name="invoke_agent weather"),
    chat(2, 1, start=5, end=20, question="Weather?", answer=None, **{
        published.GEN_AI_OUTPUT_MESSAGES: json.dumps(
            [{"role": "assistant", "parts": [TOOL_CALL_PART]}]),
        published.GEN_AI_TOOL_DEFINITIONS: json.dumps(
            [{"type": "function", "name": "get_weather", "parameters": {}}]),
    }),
    span(3, 1, {OP: Ops.EXECUTE_TOOL.value, published.GEN_AI_TOOL_NAME: "get_weather",
                published.GEN_AI_TOOL_CALL_ID: "c1",
                published.GEN_AI_TOOL_CALL_ARGUMENTS: '{"city": "Paris"}',
                published.GEN_AI_TOOL_CALL_RESULT: '{"sky": "clear"}'},
         start=21, end=30, name="execute_tool get_weather"),
    chat(4, 1, start=31, end=90, question="Weather?", answer="Clear skies."),
]

# OpenLLMetry before gen_ai.operation.name: indexed attributes, no operation.
OLDER = [span(1, None, {
    published.GEN_AI_SYSTEM: "openai",
    f"{published.GEN_AI_PROMPT}.0.role": "system", f"{published.GEN_AI_PROMPT}.0.content": "S.",
    f"{published.GEN_AI_PROMPT}.1.role": "user", f"{published.GEN_AI_PROMPT}.1.content": "U?",
    f"{published.GEN_AI_COMPLETION}.0.role": "assistant",
    f"{published.GEN_AI_COMPLETION}.0.content": "Old answer.",
    f"{published.GEN_AI_COMPLETION}.0.tool_calls.0.name": "lookup",
    f"{published.GEN_AI_COMPLETION}.0.tool_calls.0.arguments": "{}",
}, start=0, end=10)]

EVENTS = [span(1, None, {OP: Ops.CHAT.value}, start=0, end=10, events=(
    SpanEvent("gen_ai.system.message", 1, {"content": "Sys."}),
    SpanEvent("gen_ai.user.message", 2, {"content": "Event question?"}),
    SpanEvent("gen_ai.choice", 9, {genai.EVENT_CONTENT: json.dumps({
        "index": 0, "finish_reason": "stop",
        "message": {"content": "Event answer.", "tool_calls": [
            {"id": "t1", "type": "function",
             "function": {"name": "calc", "arguments": "{\"x\": 1}"}}]}})}),
))]

# Retrieval through a tool (Pydantic AI's shape): the answering call gets the tool's result back
# in a ``user`` message's ``tool_call_response`` part, a list of texts under ``result``.
TOOL_RETRIEVAL = [
    chat(1, DROPPED_ROOT, start=0, end=10, question="Capital?", answer=None, **{
        published.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": [
            {"type": "tool_call", "id": "c1", "name": "retrieve", "arguments": {"q": "x"}}]}]),
    }),
    chat(2, DROPPED_ROOT, start=20, end=30, question="Capital?", answer="Paris.", **{
        published.GEN_AI_INPUT_MESSAGES: json.dumps([
            parts("user", "Capital?"),
            {"role": "assistant", "parts": [
                {"type": "tool_call", "id": "c1", "name": "retrieve", "arguments": {}}]},
            {"role": "user", "parts": [{"type": "tool_call_response", "id": "c1",
                                        "result": ["Paris is the capital.", "It is in France."]}]},
        ]),
    }),
]

# The conventions' own field (``response``), a result that is not a list of texts: one document.
TOOL_RESPONSE = [chat(1, DROPPED_ROOT, start=0, end=10, question="Weather?", answer="Clear.", **{
    published.GEN_AI_INPUT_MESSAGES: json.dumps([
        parts("user", "Weather?"),
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1",
                                    "response": {"sky": "clear"}}]},
    ]),
})]

# OpenLIT: the system prompt as ``gen_ai.system_instructions`` and as the first input message.
SYSTEM_TWICE = [chat(1, DROPPED_ROOT, start=0, end=10, question="Q?", answer="A.", **{
    published.GEN_AI_INPUT_MESSAGES: json.dumps(
        [parts("system", "Be brief."), parts("user", "Q?")]),
})]

# openai-v2's per-message events: a tool message's content, a JSON list of texts.
TOOL_EVENT = [span(1, None, {OP: Ops.CHAT.value}, start=0, end=10, events=(
    SpanEvent("gen_ai.user.message", 1, {"content": "Q?"}),
    SpanEvent("gen_ai.tool.message", 2, {"content": '["Doc one.", "Doc two."]', "id": "t1"}),
    SpanEvent("gen_ai.choice", 9, {genai.EVENT_CONTENT: json.dumps(
        {"index": 0, "finish_reason": "stop", "message": {"content": "A."}})}),
))]

GENAI = [
    pytest.param(TOOL_RETRIEVAL, {
        "answer": "Paris.", "answer_span": sid(2), "source": "llm_input",
        "docs": ("Paris is the capital.", "It is in France.", "Be brief.", "Capital?"),
    }, id="tool-results-are-the-answering-calls-context"),
    pytest.param(TOOL_RESPONSE, {
        "answer": "Clear.", "docs": ('{"sky": "clear"}', "Be brief.", "Weather?"),
    }, id="a-tool-response-that-is-not-texts-is-one-document"),
    pytest.param(SYSTEM_TWICE, {"docs": ("Be brief.", "Q?")},
                 id="system-instructions-and-system-message-once"),
    pytest.param(TOOL_EVENT, {"answer": "A.", "docs": ("Doc one.", "Doc two.", "Q?")},
                 id="tool-message-event"),
    pytest.param(CHAT_JSON, {
        "answer": "Paris.", "answer_span": sid(1), "input": "Capital of France?",
        "source": "llm_input", "docs": ("Be brief.", "Capital of France?"),
    }, id="chat-json-messages"),
    pytest.param(RETRIEVAL, {"answer": "A.", "source": "llm_input", "docs": ("Be brief.", "Q?")},
                 id="retrieval-ids-only-falls-back-to-llm-input"),
    pytest.param(RETRIEVAL_WITH_TEXT, {"source": "retrieval", "docs": ("Doc text.",)},
                 id="retrieval-span-with-document-text"),
    pytest.param(EXECUTE_TOOL, {
        "answer": "Clear skies.", "answer_span": sid(4), "input": "Weather?",
        "tools": (("get_weather", '{"city": "Paris"}', '{"sky": "clear"}'),),
        "available": ("get_weather",), "agent": True, "session": "conv-1",
    }, id="invoke-agent-execute-tool"),
    pytest.param(OLDER, {
        "answer": "Old answer.", "input": "U?", "docs": ("S.", "U?"),
        "tools": (("lookup", "{}", None),), "available": ("lookup",),
    }, id="older-prompt-completion-attributes"),
    pytest.param(EVENTS, {
        "answer": "Event answer.", "input": "Event question?", "docs": ("Sys.", "Event question?"),
        "tools": (("calc", '{"x": 1}', None),),
    }, id="gen-ai-events"),
]


@pytest.mark.parametrize(("spans", "expected"), GENAI)
def test_genai(spans: list[Span], expected: dict[str, Any]) -> None:
    check(map_trace(spans), expected)


@pytest.mark.parametrize(("ours", "theirs"), [
    (genai.GEN_AI_OPERATION_NAME, published.GEN_AI_OPERATION_NAME),
    (genai.GEN_AI_INPUT_MESSAGES, published.GEN_AI_INPUT_MESSAGES),
    (genai.GEN_AI_OUTPUT_MESSAGES, published.GEN_AI_OUTPUT_MESSAGES),
    (genai.GEN_AI_SYSTEM_INSTRUCTIONS, published.GEN_AI_SYSTEM_INSTRUCTIONS),
    (genai.GEN_AI_PROMPT, published.GEN_AI_PROMPT),
    (genai.GEN_AI_COMPLETION, published.GEN_AI_COMPLETION),
    (genai.GEN_AI_TOOL_NAME, published.GEN_AI_TOOL_NAME),
    (genai.GEN_AI_TOOL_CALL_ID, published.GEN_AI_TOOL_CALL_ID),
    (genai.GEN_AI_TOOL_CALL_ARGUMENTS, published.GEN_AI_TOOL_CALL_ARGUMENTS),
    (genai.GEN_AI_TOOL_CALL_RESULT, published.GEN_AI_TOOL_CALL_RESULT),
    (genai.GEN_AI_TOOL_DEFINITIONS, published.GEN_AI_TOOL_DEFINITIONS),
    (genai.GEN_AI_CONVERSATION_ID, published.GEN_AI_CONVERSATION_ID),
    (genai.CHAT, Ops.CHAT.value),
    (genai.TEXT_COMPLETION, Ops.TEXT_COMPLETION.value),
    (genai.GENERATE_CONTENT, Ops.GENERATE_CONTENT.value),
    (genai.RETRIEVAL, Ops.RETRIEVAL.value),
    (genai.EXECUTE_TOOL, Ops.EXECUTE_TOOL.value),
    (genai.INVOKE_AGENT, Ops.INVOKE_AGENT.value),
], ids=lambda value: str(value))
def test_names_match_the_published_constants(ours: str, theirs: str) -> None:
    assert ours == theirs


def _answering(inputs: list[dict[str, Any]], answer: str = "A.") -> Span:
    return chat(1, DROPPED_ROOT, start=0, end=10, question="Q?", answer=answer, **{
        published.GEN_AI_INPUT_MESSAGES: json.dumps(inputs)})


def _tool_result(result: Any, key: str = "result") -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "tool_call_response", "id": "c", key: result}]}


def test_a_long_conversation_keeps_the_tool_results_among_the_first_documents() -> None:
    """The judge reads the first MAX_DOCUMENTS (12): earlier turns must not push them out."""
    turns = [parts("user", f"Turn {n}?") for n in range(14)]
    mapped = map_trace([_answering([*turns, _tool_result(["Fact one.", "Fact two."])])])
    assert mapped is not None
    assert [d.content for d in mapped.documents[:3]] == ["Fact one.", "Fact two.", "Be brief."]


@pytest.mark.parametrize(("result", "expected"), [
    pytest.param([{"title": "A", "content": "Alpha."}, {"page_content": "Beta."}],
                 ["Alpha.", "Beta."], id="objects-with-text"),
    pytest.param(["open", "open", "closed"], ["open", "open", "closed"],
                 id="repeated-items-all-count"),
    pytest.param([{"id": 1}, "text"], ['[{"id": 1}, "text"]'], id="an-item-without-text"),
    pytest.param([f"d{n}" for n in range(257)], [json.dumps([f"d{n}" for n in range(257)])],
                 id="more-items-than-the-cap-kept-whole"),
])
def test_a_tool_result_list_is_split_into_its_documents(result: Any,
                                                        expected: list[str]) -> None:
    mapped = map_trace([_answering([parts("user", "Q?"), _tool_result(result)])])
    assert mapped is not None
    assert [d.content for d in mapped.documents] == [*expected, "Be brief.", "Q?"]


def test_two_calls_with_the_same_result_are_two_documents() -> None:
    mapped = map_trace([_answering([parts("user", "Q?"), _tool_result("Sunny, 22C"),
                                    _tool_result("Sunny, 22C")])])
    assert mapped is not None
    assert [d.content for d in mapped.documents] == ["Sunny, 22C", "Sunny, 22C", "Be brief.",
                                                     "Q?"]


def test_a_null_response_falls_back_to_the_result() -> None:
    part = {"type": "tool_call_response", "id": "c", "response": None, "result": "R."}
    mapped = map_trace([_answering([parts("user", "Q?"), {"role": "tool", "parts": [part]}])])
    assert mapped is not None
    assert mapped.documents[0].content == "R."


def test_a_tool_response_among_the_output_messages_is_not_read() -> None:
    """Only a call's input holds tool results: in the output they change nothing (the
    completion's ``output.value`` still answers when the messages hold no text)."""
    output = json.dumps([_tool_result("Not an answer.")])
    found = span(1, DROPPED_ROOT, {
        OP: Ops.CHAT.value, published.GEN_AI_OUTPUT_MESSAGES: output,
        SpanAttributes.OUTPUT_VALUE: "From output.value."}, start=0, end=10)
    assert genai.output_messages(found) == []
