"""GenAI log records joined to their spans and read as the spans' own: the shapes
``opentelemetry-instrumentation-openai-v2`` 2.4b0 writes (its ``utils.message_to_event`` /
``choice_to_event`` in the default mode, ``opentelemetry-util-genai``'s
``gen_ai.client.inference.operation.details`` with ``event_only`` on the latest conventions),
as the OTLP decoder hands them over: a key-value list body as a dict, arrays as tuples."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as published

from consumer.telemetry import genai
from consumer.telemetry.conventions import map_trace
from consumer.telemetry.log_events import join_logs
from consumer.telemetry.spans import LogEvent, Span, SpanEvent
from tests.unit.telemetry.span_builder import DROPPED_ROOT, TRACE_ID, check, sid, span

SYSTEM = "Answer from the documents: Refunds within 30 days."
QUESTION = "How long do I have for a refund?"
ANSWER = "You have 30 days."
OPENAI = {"gen_ai.system": "openai"}  # every legacy record's attributes


def chat(n: int, extra: dict[str, Any] | None = None, *, start: int = 0, end: int = 100) -> Span:
    """A chat span as openai-v2 writes it without content on the span."""
    return span(n, DROPPED_ROOT, {
        published.GEN_AI_OPERATION_NAME: "chat", "gen_ai.system": "openai",
        published.GEN_AI_REQUEST_MODEL: "gpt-4o-mini", **(extra or {}),
    }, start=start, end=end, name="chat gpt-4o-mini")


def log(n: int | None, name: str, time: int, body: Any = None, **attributes: Any) -> LogEvent:
    """A log record of span ``n`` (None: it names no span), as the decoder makes it."""
    if body is not None:
        attributes[genai.EVENT_CONTENT] = body if isinstance(body, dict) else {"content": body}
    return LogEvent(TRACE_ID, sid(n) if n is not None else None,
                    SpanEvent(name, time, {**OPENAI, **attributes}))


def choice(message: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return {"index": index, "finish_reason": "stop", "message": message}


def per_message(n: int, *, start: int = 0, system_role: str = "system") -> list[LogEvent]:
    """The records of one call in the default mode, content capture on."""
    return [
        log(n, f"gen_ai.{system_role}.message", start + 1, {"content": SYSTEM}),
        log(n, "gen_ai.user.message", start + 2, {"content": QUESTION}),
        log(n, "gen_ai.choice", start + 90, choice({"role": "assistant", "content": ANSWER})),
    ]


def parts(role: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"role": role, "parts": ({"type": "text", "content": text},), **extra}


def details(n: int | None, extra: dict[str, Any] | None = None, time: int = 95) -> LogEvent:
    """The one record of a call in ``event_only`` mode: structured content attributes."""
    return log(n, genai.OPERATION_DETAILS_EVENT, time, **{
        published.GEN_AI_OPERATION_NAME: "chat", published.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
        published.GEN_AI_INPUT_MESSAGES: (parts("system", SYSTEM), parts("user", QUESTION)),
        published.GEN_AI_OUTPUT_MESSAGES: (parts("assistant", ANSWER, finish_reason="stop"),),
        **(extra or {}),
    })


SEARCH_CALL = {"id": "call_1", "type": "function",
               "function": {"name": "search_docs", "arguments": '{"q": "refund"}'}}

JOINED = [
    pytest.param([chat(1)], per_message(1), {
        "answer": ANSWER, "answer_span": sid(1), "input": QUESTION, "source": "llm_input",
        "docs": (SYSTEM, QUESTION),
    }, id="per-message-records-structured-bodies"),
    pytest.param([chat(1)], per_message(1, system_role="developer"), {
        "answer": ANSWER, "input": QUESTION, "docs": (SYSTEM, QUESTION),
    }, id="a-developer-message-is-the-system-prompt"),
    pytest.param([chat(1)], [
        log(1, "gen_ai.system.message", 1,
            **{genai.EVENT_CONTENT: json.dumps({"content": SYSTEM})}),
        log(1, "gen_ai.user.message", 2, QUESTION),  # a body that is no key-value list
        log(1, "gen_ai.choice", 9, **{genai.EVENT_CONTENT: json.dumps(
            choice({"role": "assistant", "content": ANSWER}))}),
    ], {"answer": ANSWER, "input": QUESTION, "docs": (SYSTEM, QUESTION)},
        id="per-message-records-json-bodies"),
    pytest.param([chat(1)], [
        log(1, "gen_ai.user.message", 2, {"content": (
            {"type": "text", "text": "Refunds?"}, {"type": "image_url", "image_url": {}},
            {"type": "text", "text": QUESTION})}),
        log(1, "gen_ai.choice", 9, choice({"role": "assistant", "content": ANSWER})),
    ], {"answer": ANSWER, "input": f"Refunds?\n{QUESTION}"},
        id="user-content-as-an-array-of-openai-parts"),
    pytest.param([chat(1, start=0, end=50), chat(2, start=60, end=100)], [
        log(1, "gen_ai.user.message", 1, {"content": QUESTION}),
        log(1, "gen_ai.choice", 40, choice({"role": "assistant", "tool_calls": (SEARCH_CALL,)})),
        log(2, "gen_ai.user.message", 61, {"content": QUESTION}),
        log(2, "gen_ai.assistant.message", 62, {"tool_calls": (SEARCH_CALL,)}),
        log(2, "gen_ai.tool.message", 63, {"content": "Refunds within 30 days.", "id": "call_1"}),
        log(2, "gen_ai.choice", 99, choice({"role": "assistant", "content": ANSWER})),
    ], {"answer": ANSWER, "answer_span": sid(2), "input": QUESTION,
        "tools": (("search_docs", '{"q": "refund"}', None),), "available": ("search_docs",)},
        id="tool-call-in-a-choice-and-the-next-calls-history"),
    pytest.param([chat(1)], [details(1, {
        published.GEN_AI_SYSTEM_INSTRUCTIONS: ({"type": "text", "content": "Be brief."},),
        published.GEN_AI_TOOL_DEFINITIONS: (
            {"type": "function", "name": "search_docs", "description": None,
             "parameters": {"type": "object"}},),
    })], {
        "answer": ANSWER, "answer_span": sid(1), "input": QUESTION,
        "docs": ("Be brief.", SYSTEM, QUESTION), "available": ("search_docs",),
    }, id="operation-details-structured"),
    pytest.param([chat(1)], [details(1, {
        published.GEN_AI_OUTPUT_MESSAGES: ({"role": "assistant", "finish_reason": "tool_calls",
                                            "parts": ({"type": "tool_call", "id": "call_1",
                                                       "name": "search_docs",
                                                       "arguments": {"q": "refund"}},)},),
    })], {"answer": "", "tools": (("search_docs", '{"q": "refund"}', None),)},
        id="operation-details-tool-call-part"),
    pytest.param([chat(1, {published.GEN_AI_OUTPUT_MESSAGES: json.dumps(
        [{"role": "assistant", "parts": [{"type": "text", "content": "The span's own."}]}])})],
        [details(1)], {"answer": "The span's own.", "input": QUESTION},
        id="the-spans-own-attributes-win-over-the-details"),
    pytest.param([chat(1)], [log(None, "gen_ai.user.message", 2, {"content": QUESTION}),
                             log(None, "gen_ai.choice", 9,
                                 choice({"role": "assistant", "content": ANSWER}))],
                 {"answer": ANSWER, "answer_span": sid(1), "input": QUESTION},
                 id="records-without-a-span-id-go-to-the-one-llm-call"),
]


@pytest.mark.parametrize(("spans", "logs", "expected"), JOINED)
def test_log_records_read_as_their_spans_own(
    spans: list[Span], logs: list[LogEvent], expected: dict[str, Any]
) -> None:
    check(map_trace(join_logs(spans, logs)), expected)


def test_without_the_join_the_trace_has_no_answer() -> None:
    """What the worker saw before: the chat span alone holds no content."""
    mapped = map_trace([chat(1)])
    assert mapped is not None
    assert (mapped.has_answer, mapped.answer_found) == (False, False)


def test_records_follow_the_spans_own_events_in_time_order() -> None:
    own = SpanEvent("gen_ai.content.prompt", 50, {})
    first = span(1, None, {published.GEN_AI_OPERATION_NAME: "chat"}, start=0, end=100,
                 events=(own,))
    later, earlier, same_time = (log(1, "b", 30), log(1, "a", 10), log(1, "c", 30))
    [joined] = join_logs([first], [later, earlier, same_time])
    assert [event.name for event in joined.events] == ["gen_ai.content.prompt", "a", "b", "c"]


def test_the_earlier_details_record_of_a_span_wins_and_only_gen_ai_keys_join() -> None:
    spans = [chat(1)]
    logs = [details(1, {published.GEN_AI_INPUT_MESSAGES: (parts("user", "late"),)}, time=99),
            details(1, {"server.address": "api.openai.com",
                        published.GEN_AI_REQUEST_MODEL: "other-model"}, time=90)]
    [joined] = join_logs(spans, logs)
    assert joined.attributes[published.GEN_AI_INPUT_MESSAGES] == (
        parts("system", SYSTEM), parts("user", QUESTION))
    assert joined.attributes[published.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
    assert "server.address" not in joined.attributes


@pytest.mark.parametrize(("spans", "logs"), [
    pytest.param([chat(1, start=0, end=40), chat(2, start=50, end=90)],
                 [log(None, "gen_ai.choice", 9, choice({"content": ANSWER}))],
                 id="no-span-id-and-two-llm-calls"),
    pytest.param([span(1, None, {published.GEN_AI_OPERATION_NAME: "retrieval"}, start=0,
                       end=5)],
                 [log(None, "gen_ai.choice", 9, choice({"content": ANSWER}))],
                 id="no-span-id-and-no-llm-call"),
    pytest.param([chat(1)], [log(7, "gen_ai.choice", 9, choice({"content": ANSWER}))],
                 id="a-span-the-trace-does-not-hold"),
])
def test_records_that_belong_to_no_span_held_are_left_out(
    spans: list[Span], logs: list[LogEvent]
) -> None:
    joined = join_logs(spans, logs)
    assert joined == tuple(spans)
    assert all(span.events == () for span in joined)


def test_spans_without_records_are_returned_unchanged_and_in_order() -> None:
    spans = [chat(2, start=50, end=90), chat(1, start=0, end=40)]
    joined = join_logs(spans, per_message(1))
    assert joined[0] is spans[0]
    assert [span.span_id for span in joined] == [sid(2), sid(1)]
    assert len(joined[1].events) == 3


def test_a_choice_without_content_is_no_answer_recorded() -> None:
    """Content capture off: openai-v2 still writes the choice, with no content."""
    spans = join_logs([chat(1)], [log(1, "gen_ai.choice", 9, choice({"role": "assistant"}))])
    mapped = map_trace(spans)
    assert mapped is not None
    assert (mapped.has_answer, mapped.answer_found) == (False, False)


def test_the_event_names_are_the_conventions() -> None:
    """The names openai-v2 writes (utils.py: f"gen_ai.{role}.message", "gen_ai.choice") and
    util-genai's details event, as the readers spell them."""
    assert set(genai.MESSAGE_EVENTS) == {
        f"gen_ai.{role}.message" for role in ("system", "developer", "user", "assistant", "tool")}
    assert (genai.CHOICE_EVENT, genai.OPERATION_DETAILS_EVENT) == (
        "gen_ai.choice", "gen_ai.client.inference.operation.details")
