"""Spans -> MappedTrace -> the trace event the rules read: tools, tool calls and agents carried
over, and the rules' findings on traces as instrumentations write them."""

from __future__ import annotations

import json

from openinference.semconv.trace import SpanAttributes, ToolAttributes

from consumer.rules.answered_without_tool import AnsweredWithoutTool
from consumer.rules.missing_citation import MissingCitation
from consumer.telemetry import genai
from consumer.telemetry.conventions import map_trace
from consumer.telemetry.mapped_trace import UNNAMED_TOOL, MappedTrace
from consumer.telemetry.origin import TraceOrigin
from consumer.telemetry.spans import Span
from schemas.trace import TraceEvent
from tests.unit.telemetry.span_builder import (
    AGENT,
    KIND,
    LLM,
    RETRIEVER,
    TOOL,
    documents,
    messages,
    output_tool_call,
    span,
)

SA = SpanAttributes
IN, OUT = SA.LLM_INPUT_MESSAGES, SA.LLM_OUTPUT_MESSAGES
TOOL_DEFS = {
    f"{SA.LLM_TOOLS}.0.{ToolAttributes.TOOL_JSON_SCHEMA}": json.dumps(
        {"type": "function", "function": {"name": "lookup_order"}}),
    f"{SA.LLM_TOOLS}.1.{ToolAttributes.TOOL_JSON_SCHEMA}": json.dumps({"name": "search_kb"}),
}
TOOLS_RULE, CITATION_RULE = AnsweredWithoutTool(), MissingCitation()


def llm(n: int, parent: int | None, answer: str | None, *, start: int, end: int,
        **extra: object) -> Span:
    attributes = {KIND: LLM, **messages(IN, ("user", "Where is order 88123?")), **extra}
    if answer is not None:
        attributes |= messages(OUT, ("assistant", answer))
    return span(n, parent, attributes, start=start, end=end)


def event(spans: list[Span]) -> tuple[MappedTrace, TraceEvent]:
    mapped = map_trace(spans)
    assert mapped is not None
    return mapped, mapped.to_trace_event()


def origin(mapped: MappedTrace) -> TraceOrigin:
    return TraceOrigin(span_id=mapped.answer_span_id, project_id=None, session_id=None,
                       context_source=mapped.context_source, spans=2, root_seen=True,
                       closed_by="quiet")


def test_openinference_tool_use_is_carried_and_passes() -> None:
    _, trace = event([
        span(1, None, {KIND: AGENT, SA.INPUT_VALUE: "Where is order 88123?",
                       SA.OUTPUT_VALUE: "It shipped."}, start=0, end=100),
        llm(2, 1, None, start=5, end=20, **TOOL_DEFS,
            **output_tool_call(0, 0, "lookup_order", '{"id": "88123"}', "call_1")),
        span(3, 1, {KIND: TOOL, SA.TOOL_NAME: "lookup_order", SA.TOOL_ID: "call_1",
                    SA.INPUT_VALUE: '{"id": "88123"}', SA.OUTPUT_VALUE: "shipped"},
             start=21, end=30),
        llm(4, 1, "It shipped.", start=31, end=90),
    ])
    assert trace.tools_available == ["lookup_order", "search_kb"]
    assert [(c.name, c.arguments, c.result) for c in trace.tool_calls or []] == [
        ("lookup_order", '{"id": "88123"}', "shipped")]
    assert trace.agent is True
    outcome = TOOLS_RULE.check(trace, None)
    assert (outcome.passed, outcome.reason) == (True, "made 1 tool call: lookup_order")


def test_tools_offered_but_not_called_fail_naming_them() -> None:
    _, trace = event([llm(1, None, "It shipped yesterday.", start=0, end=10, **TOOL_DEFS)])
    assert TOOLS_RULE.applies(trace, None)
    assert TOOLS_RULE.check(trace, None).reason == (
        "answered without calling a tool; 2 were available: lookup_order, search_kb")


def test_an_agent_span_alone_makes_the_rule_apply() -> None:
    _, trace = event([
        span(1, None, {KIND: AGENT, SA.OUTPUT_VALUE: "Booked for 8pm."}, start=0, end=100),
        llm(2, 1, "Booked for 8pm.", start=5, end=90),
    ])
    assert (trace.agent, trace.tools_available, trace.tool_calls) == (True, None, None)
    assert not TOOLS_RULE.check(trace, None).passed


def test_genai_definitions_and_execute_tool_span() -> None:
    definitions = json.dumps([{"type": "function", "name": "get_weather"}])
    _, trace = event([
        span(1, None, {genai.GEN_AI_OPERATION_NAME: "invoke_agent"}, start=0, end=100),
        span(2, 1, {genai.GEN_AI_OPERATION_NAME: "chat",
                    genai.GEN_AI_TOOL_DEFINITIONS: definitions,
                    genai.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": [
                        {"type": "text", "content": "Sunny in Oslo."}]}])},
             start=40, end=90),
        span(3, 1, {genai.GEN_AI_OPERATION_NAME: "execute_tool"}, start=10, end=30,
             name="execute_tool get_weather"),
    ])
    assert trace.tools_available == ["get_weather"]
    assert [c.name for c in trace.tool_calls or []] == ["get_weather"]
    assert TOOLS_RULE.check(trace, None).passed


def test_tools_listed_as_malformed_json_leave_only_the_agent_signal() -> None:
    broken = {genai.GEN_AI_OPERATION_NAME: "chat",
              genai.GEN_AI_TOOL_DEFINITIONS: '[{"name": "get_weather"',
              genai.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": [
                  {"type": "text", "content": "Sunny."}]}])}
    _, alone = event([span(1, None, broken, start=0, end=10)])
    assert alone.tools_available is None
    assert not TOOLS_RULE.applies(alone, None)
    _, in_agent = event([
        span(1, None, {genai.GEN_AI_OPERATION_NAME: "invoke_agent"}, start=0, end=100),
        span(2, 1, broken, start=10, end=90),
    ])
    assert TOOLS_RULE.applies(in_agent, None)
    assert "does not list its tools" in TOOLS_RULE.check(in_agent, None).reason


def test_a_tool_span_without_any_name_still_counts_as_a_call() -> None:
    mapped, trace = event([
        span(1, None, {KIND: AGENT, SA.OUTPUT_VALUE: "Done."}, start=0, end=100),
        span(2, 1, {KIND: TOOL, SA.INPUT_VALUE: "{}"}, start=5, end=10, name=""),
        llm(3, 1, "Done.", start=20, end=90),
    ])
    assert [call.name for call in mapped.tool_calls] == [""]
    assert [call.name for call in trace.tool_calls or []] == [UNNAMED_TOOL]
    assert trace.tools_available is None  # a blank name names no tool
    outcome = TOOLS_RULE.check(trace, None)
    assert (outcome.passed, outcome.reason) == (True, f"made 1 tool call: {UNNAMED_TOOL}")


def test_a_trace_without_tools_reads_as_before() -> None:
    _, trace = event([llm(1, None, "It shipped.", start=0, end=10)])
    assert (trace.tools_available, trace.tool_calls, trace.agent) == (None, None, None)
    assert not TOOLS_RULE.applies(trace, None)


def test_citations_read_retrieved_documents_not_the_prompt() -> None:
    retrieved, trace = event([
        span(1, None, {KIND: RETRIEVER, **documents(SA.RETRIEVAL_DOCUMENTS, "Shipped [d].")},
             start=0, end=5),
        llm(2, None, "It shipped [d0].", start=10, end=20),
    ])
    assert retrieved.context_source == "retrieval"
    assert CITATION_RULE.applies(trace, origin(retrieved))
    assert CITATION_RULE.check(trace, origin(retrieved)).reason == (
        'cites a retrieved document by its id: "d0"')
    prompt_only, prompted = event([llm(1, None, "It shipped [1].", start=0, end=10)])
    assert prompt_only.context_source == "llm_input"
    assert prompted.retrieved_documents  # the judge's context: the prompt
    assert not CITATION_RULE.applies(prompted, origin(prompt_only))
