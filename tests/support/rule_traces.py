"""Traces for the three rules of ``RULES=groundedness,missing_citation,answered_without_tool``,
as ``trace_json`` events and as the spans of real OTel SDK tracers, each with the verdict every
rule must give it; and the comparison of what a verdicts topic holds with that.

A ``RuleCase`` lists the rules that apply to its trace and the verdict each must give; a rule
it does not list must give none (an empty answer lists none). ``reason_has`` pins what a
deterministic rule's reason must name (the marker found, the tools available, a failed call).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from openinference.semconv.trace import (
    DocumentAttributes,
    MessageAttributes,
    OpenInferenceSpanKindValues,
    SpanAttributes,
    ToolAttributes,
    ToolCallAttributes,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from consumer.judge.prompt import PROMPT_VERSION
from consumer.rules.base import rule_id
from consumer.rules.registry import REGISTRY, RuleOptions
from consumer.rules.verdicts import verdict_id
from tests.support.otel_spans import KIND, Recorder, otlp_proto, rag_trace

GROUNDEDNESS, CITATION, TOOLS = "groundedness", "missing_citation", "answered_without_tool"
RULES = (GROUNDEDNESS, CITATION, TOOLS)
# Each rule's ``name@version``, as its verdicts name it.
RULE_IDS = {GROUNDEDNESS: PROMPT_VERSION,
            **{name: rule_id(make(RuleOptions())) for name, make in REGISTRY.items()}}
ALL_RULES = ",".join(RULES)
DETERMINISTIC = (CITATION, TOOLS)
PASS, FAIL = "pass", "fail"

_LLM = OpenInferenceSpanKindValues.LLM.value
_AGENT = OpenInferenceSpanKindValues.AGENT.value
_TOOL = OpenInferenceSpanKindValues.TOOL.value
_RETRIEVER = OpenInferenceSpanKindValues.RETRIEVER.value
_CHAIN = OpenInferenceSpanKindValues.CHAIN.value
SA = SpanAttributes


@dataclass(frozen=True)
class RuleCase:
    """One trace, its record(s), and what each rule must say of it."""

    name: str
    trace_id: str
    records: tuple[bytes, ...]  # trace_json: one event; spans: OTLP batches, in send order
    expected: dict[str, str]  # rule -> pass | fail; a rule not listed gives no verdict
    reason_has: dict[str, str] = field(default_factory=dict)  # rule -> text in its reason


# -- trace_json -------------------------------------------------------------------------------

DUNE = "Dune is a 1965 science-fiction novel by the American author Frank Herbert."
ORDER = "Order 88123 left the warehouse on 3 May and is with the courier."


def json_cases() -> list[RuleCase]:
    """A mixed ``trace_json`` stream: citations or not, tools called or not, a failed call,
    no documents, empty answers."""
    tools = ["lookup_order", "search_kb"]
    called = [{"name": "lookup_order", "arguments": {"id": "88123"}, "result": "shipped"}]
    cases: list[tuple[str, dict[str, Any], dict[str, str], dict[str, str]]] = [
        ("cited", {"output": "Dune was written by Frank Herbert [1].",
                   "retrieved_documents": [DUNE]},
         {GROUNDEDNESS: PASS, CITATION: PASS}, {CITATION: '"[1]"'}),
        ("uncited", {"output": "Dune was written by Frank Herbert. [[score=2]]",
                     "retrieved_documents": [DUNE, "Herbert was born in Tacoma."]},
         {GROUNDEDNESS: FAIL, CITATION: FAIL}, {CITATION: "2 retrieved documents"}),
        ("tool-called", {"output": "Order 88123 is with the courier.",
                         "tools_available": tools, "tool_calls": called},
         {GROUNDEDNESS: PASS, TOOLS: PASS}, {TOOLS: "made 1 tool call: lookup_order"}),
        ("tool-not-called", {"output": "Your order has probably shipped by now.",
                             "tools_available": tools},
         {GROUNDEDNESS: PASS, TOOLS: FAIL}, {TOOLS: "lookup_order, search_kb"}),
        ("agent-tool-failed", {"output": "I could not look your order up just now.",
                               "agent": True, "tool_calls": [
                                   {"name": "lookup_order", "error": "timed out after 10 s"}]},
         {GROUNDEDNESS: PASS, TOOLS: PASS}, {TOOLS: "1 failed: lookup_order (timed out"}),
        ("rag-agent", {"output": "Order 88123 left on 3 May [1].",
                       "retrieved_documents": [ORDER], "tools_available": tools,
                       "tool_calls": called},
         {GROUNDEDNESS: PASS, CITATION: PASS, TOOLS: PASS}, {}),
        ("no-documents", {"output": "Paris is the capital of France. [[score=1]]"},
         {GROUNDEDNESS: FAIL}, {}),
        ("empty-answer", {"output": "   ", "retrieved_documents": [DUNE],
                          "tools_available": tools}, {}, {}),
        ("no-output", {"retrieved_documents": [DUNE], "agent": True}, {}, {}),
    ]
    # Built whole (not with streams.trace, which gives an event without output a default one).
    return [RuleCase(name, name, (json.dumps({"trace_id": name, **fields}).encode(),),
                     expected, reasons)
            for name, fields, expected, reasons in cases]


# -- spans ------------------------------------------------------------------------------------


def span_cases() -> list[RuleCase]:
    """The same situations as instrumented applications trace them (OpenInference and the OTel
    GenAI conventions), each trace one record keyed by its hex id, the agent's in two."""
    recorder = Recorder(service="rules-app")
    cases: list[RuleCase] = []

    def add(name: str, spans: list[ReadableSpan], expected: dict[str, str],
            reasons: dict[str, str] | None = None, split: int = 0) -> None:
        batches = [spans[:split], spans[split:]] if split else [spans]
        cases.append(RuleCase(name, _hex_trace_id(spans),
                              tuple(_otlp(batch) for batch in batches), expected, reasons or {}))

    rag_trace(recorder.tracer, "Who wrote Dune?")  # answers "Frank Herbert [1]."
    add("span-rag-cited", recorder.spans(), {GROUNDEDNESS: PASS, CITATION: PASS},
        {CITATION: '"[1]"'})
    _rag_uncited(recorder.tracer)
    add("span-rag-uncited", recorder.spans(), {GROUNDEDNESS: PASS, CITATION: FAIL},
        {CITATION: "no citation marker"})
    _openinference_agent(recorder.tracer)
    add("span-agent-tool-called", recorder.spans(), {GROUNDEDNESS: PASS, TOOLS: PASS},
        {TOOLS: "made 1 tool call: lookup_order"}, split=2)
    _tools_offered_not_called(recorder.tracer)
    add("span-tools-not-called", recorder.spans(), {GROUNDEDNESS: PASS, TOOLS: FAIL},
        {TOOLS: "lookup_order, search_kb"})
    _genai_agent_failed_tool(recorder.tracer)
    add("span-agent-tool-failed", recorder.spans(), {GROUNDEDNESS: PASS, TOOLS: PASS},
        {TOOLS: "1 failed: get_weather"})
    _empty_answer(recorder.tracer)
    add("span-empty-answer", recorder.spans(), {})
    with recorder.tracer.start_as_current_span("GET /healthz", kind=SpanKind.SERVER):
        pass
    add("span-no-genai", recorder.spans(), {})
    return cases


def _rag_uncited(tracer: Tracer) -> None:
    with tracer.start_as_current_span("POST /ask", kind=SpanKind.SERVER), \
            tracer.start_as_current_span("query", attributes={
                KIND: _CHAIN, SA.INPUT_VALUE: "Who wrote Dune?"}) as chain:
        with tracer.start_as_current_span("retrieve", attributes={
            KIND: _RETRIEVER,
            f"{SA.RETRIEVAL_DOCUMENTS}.0.{DocumentAttributes.DOCUMENT_ID}": "doc-7",
            f"{SA.RETRIEVAL_DOCUMENTS}.0.{DocumentAttributes.DOCUMENT_CONTENT}": DUNE,
        }):
            pass
        with tracer.start_as_current_span("chat", attributes={
                KIND: _LLM, **_messages(SA.LLM_OUTPUT_MESSAGES,
                                        ("assistant", "Frank Herbert wrote Dune."))}):
            pass
        chain.set_attribute(SA.OUTPUT_VALUE, "Frank Herbert wrote Dune.")


def _openinference_agent(tracer: Tracer) -> None:
    """An agent: the model, offered two tools, asks for one; the tool runs; the model answers."""
    answer = "Order 88123 left the warehouse on 3 May."
    with tracer.start_as_current_span("POST /support", kind=SpanKind.SERVER), \
            tracer.start_as_current_span("support-agent", attributes={
                KIND: _AGENT, SA.INPUT_VALUE: "Where is order 88123?"}) as agent:
        call = f"{SA.LLM_OUTPUT_MESSAGES}.0.{MessageAttributes.MESSAGE_TOOL_CALLS}.0."
        with tracer.start_as_current_span("ChatOpenAI", attributes={
            KIND: _LLM, **_tool_definitions(), **_messages(
                SA.LLM_INPUT_MESSAGES, ("user", "Where is order 88123?")),
            f"{SA.LLM_OUTPUT_MESSAGES}.0.{MessageAttributes.MESSAGE_ROLE}": "assistant",
            call + ToolCallAttributes.TOOL_CALL_ID: "call_1",
            call + ToolCallAttributes.TOOL_CALL_FUNCTION_NAME: "lookup_order",
            call + ToolCallAttributes.TOOL_CALL_FUNCTION_ARGUMENTS_JSON: '{"id": "88123"}',
        }):
            pass
        with tracer.start_as_current_span("lookup_order", attributes={
            KIND: _TOOL, SA.TOOL_NAME: "lookup_order", SA.TOOL_ID: "call_1",
            SA.INPUT_VALUE: '{"id": "88123"}', SA.OUTPUT_VALUE: ORDER,
        }):
            pass
        with tracer.start_as_current_span("ChatOpenAI", attributes={
            KIND: _LLM, **_tool_definitions(),
            **_messages(SA.LLM_INPUT_MESSAGES, ("user", "Where is order 88123?"),
                        ("tool", ORDER)),
            **_messages(SA.LLM_OUTPUT_MESSAGES, ("assistant", answer)),
        }):
            pass
        agent.set_attribute(SA.OUTPUT_VALUE, answer)


def _tools_offered_not_called(tracer: Tracer) -> None:
    with tracer.start_as_current_span("POST /support", kind=SpanKind.SERVER), \
            tracer.start_as_current_span("ChatOpenAI", attributes={
                KIND: _LLM, **_tool_definitions(),
                **_messages(SA.LLM_INPUT_MESSAGES, ("user", "Where is order 88123?")),
                **_messages(SA.LLM_OUTPUT_MESSAGES,
                            ("assistant", "It has most likely shipped already.")),
            }):
        pass


def _genai_agent_failed_tool(tracer: Tracer) -> None:
    """An OTel GenAI agent whose only tool call failed (span status ERROR, ``error.type``,
    the exception recorded, as the SDK records a raised exception)."""
    definitions = json.dumps([{"type": "function", "name": "get_weather"}])
    with tracer.start_as_current_span("invoke_agent weather", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"}):
        with tracer.start_as_current_span("execute_tool get_weather", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.id": "call_9", "error.type": "TimeoutError",
        }) as tool:
            tool.record_exception(TimeoutError("weather service timed out"))
            tool.set_status(Status(StatusCode.ERROR, "weather service timed out"))
        with tracer.start_as_current_span("chat gpt-4o-mini", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.tool.definitions": definitions,
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                {"type": "text", "content": "I could not reach the weather service."}]}]),
        }):
            pass


def _empty_answer(tracer: Tracer) -> None:
    with tracer.start_as_current_span("ChatOpenAI", attributes={
            KIND: _LLM, **_tool_definitions(),
            **_messages(SA.LLM_INPUT_MESSAGES, ("user", "Hello?")),
            **_messages(SA.LLM_OUTPUT_MESSAGES, ("assistant", "  "))}):
        pass


def _tool_definitions() -> dict[str, Any]:
    return {
        f"{SA.LLM_TOOLS}.0.{ToolAttributes.TOOL_JSON_SCHEMA}": json.dumps(
            {"type": "function", "function": {"name": "lookup_order"}}),
        f"{SA.LLM_TOOLS}.1.{ToolAttributes.TOOL_JSON_SCHEMA}": json.dumps(
            {"type": "function", "function": {"name": "search_kb"}}),
    }


def _messages(prefix: str, *pairs: tuple[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, (role, content) in enumerate(pairs):
        out[f"{prefix}.{i}.{MessageAttributes.MESSAGE_ROLE}"] = role
        out[f"{prefix}.{i}.{MessageAttributes.MESSAGE_CONTENT}"] = content
    return out


def _hex_trace_id(spans: Sequence[ReadableSpan]) -> str:
    context = spans[0].context
    assert context is not None
    return f"{context.trace_id:032x}"


def _otlp(spans: Sequence[ReadableSpan]) -> bytes:
    return otlp_proto(spans)  # the SDK's own OTLP encoder


# -- the verdicts against the cases ------------------------------------------------------------


def records_of(cases: Iterable[RuleCase], keyed: bool) -> tuple[list[bytes | None],
                                                                 list[bytes | None] | None]:
    """Every case's records in send order (a span trace's second batch after all the first
    ones), and their keys (the hex trace id) when ``keyed``."""
    first = [(case.trace_id, case.records[0]) for case in cases]
    rest = [(case.trace_id, record) for case in cases for record in case.records[1:]]
    ordered = first + rest
    values: list[bytes | None] = [value for _, value in ordered]
    keys: list[bytes | None] = [trace_id.encode() for trace_id, _ in ordered]
    return values, keys if keyed else None


def mismatches(verdicts: Sequence[dict[str, Any]], cases: Sequence[RuleCase],
               judge_model: str | None = "scripted-judge") -> list[str]:
    """Everything the published verdicts get wrong against the cases: a missing, extra or
    duplicated (trace, rule) verdict, a wrong outcome, rule, version, id, reason or field."""
    problems: list[str] = []
    by_case = {case.trace_id: case for case in cases}
    seen = Counter((v["trace_id"], v["rule"]) for v in verdicts)
    want = {(case.trace_id, rule) for case in cases for rule in case.expected}
    problems += [f"missing {by_case[t].name} {rule}" for t, rule in sorted(want - set(seen))]
    problems += [f"unexpected {t} {rule}" for t, rule in sorted(set(seen) - want)]
    problems += [f"{n} verdicts for {t} {rule}" for (t, rule), n in seen.items() if n > 1]
    ids = Counter(v["verdict_id"] for v in verdicts)
    problems += [f"verdict_id {i} {n} times" for i, n in ids.items() if n > 1]
    for v in verdicts:
        case = by_case.get(v["trace_id"])
        rule = v["rule"]
        if case is None or rule not in case.expected:
            continue
        where = f"{case.name} {rule}"
        if v["verdict"] != case.expected[rule]:
            problems.append(f"{where}: {v['verdict']} ({v['reason']}), want "
                            f"{case.expected[rule]}")
        if v["prompt_version"] != RULE_IDS[rule]:
            problems.append(f"{where}: prompt_version {v['prompt_version']}")
        if v["verdict_id"] != verdict_id(v["trace_id"], RULE_IDS[rule], rule):
            problems.append(f"{where}: verdict_id {v['verdict_id']} is not its rule's")
        if rule == GROUNDEDNESS and v["verdict_id"] != verdict_id(v["trace_id"]):
            problems.append(f"{where}: the groundedness id changed")
        text = case.reason_has.get(rule)
        if text is not None and text not in (v["reason"] or ""):
            problems.append(f"{where}: reason {v['reason']!r} lacks {text!r}")
        problems += _field_problems(where, rule, v, judge_model)
    return problems


def _field_problems(where: str, rule: str, v: dict[str, Any],
                    judge_model: str | None) -> list[str]:
    if rule == GROUNDEDNESS:
        fields = {"judge_model": v["judge_model"], "threshold is set": v["threshold"] is not None}
        want: dict[str, Any] = {"judge_model": judge_model, "threshold is set": True}
    else:
        fields = {name: v.get(name) for name in
                  ("judge_model", "threshold", "raw_score", "usage", "latency_ms", "error")}
        fields["score"] = v["score"]
        want = {"judge_model": None, "threshold": None, "raw_score": None, "usage": None,
                "latency_ms": 0, "error": None, "score": 1.0 if v["verdict"] == PASS else 0.0}
    return [f"{where}: {name} {fields[name]!r}, want {want[name]!r}"
            for name in want if fields[name] != want[name]]


async def end_offset(bootstrap: str, topic: str) -> int:
    """The end offset of a one-partition topic."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partition = TopicPartition(topic, 0)
        return int((await consumer.end_offsets([partition]))[partition])
    finally:
        await consumer.stop()
