"""What a trace whose answer was found nowhere is reported with: its LLM spans' attribute keys
(indices folded) and event names, sorted and bounded; and ``candidate``'s reason for it."""

from __future__ import annotations

import json
from collections.abc import Mapping

from consumer.telemetry.assembly import ClosedTrace
from consumer.telemetry.spans import Span, SpanEvent
from consumer.telemetry.trace_event import candidate
from consumer.telemetry.unanswered import MAX_EVENT_NAMES, MAX_NAMES, names_seen
from tests.unit.telemetry.span_builder import TRACE_ID, span


def chat(n: int, attributes: Mapping[str, object], *events: str) -> Span:
    return span(n, None, {"gen_ai.operation.name": "chat", **attributes}, start=0, end=10,
                events=tuple(SpanEvent(name, 1, {}) for name in events))


def test_names_are_folded_sorted_and_only_the_llm_spans() -> None:
    spans = [
        chat(1, {"llm.input_messages.0.message.role": "user",
                 "llm.input_messages.1.message.role": "user", "gen_ai.prompt.12": "x"},
             "gen_ai.user.message", "gen_ai.user.message"),
        span(2, None, {"gen_ai.operation.name": "execute_tool", "tool.secret_key": 1},
             start=0, end=5),
    ]
    seen = names_seen(spans)
    assert seen.attributes == ("gen_ai.operation.name", "gen_ai.prompt.N",
                               "llm.input_messages.N.message.role")
    assert (seen.events, seen.left_out) == (("gen_ai.user.message",), 0)


def test_names_are_bounded_events_first() -> None:
    attributes = {f"vendor.key_{i:03}": i for i in range(100)}
    events = [f"vendor.event_{i:02}" for i in range(20)]
    seen = names_seen([chat(1, attributes, *events)])
    assert len(seen.events) == MAX_EVENT_NAMES
    assert len(seen.attributes) + len(seen.events) == MAX_NAMES
    assert seen.left_out == 101 + 20 - MAX_NAMES  # the operation name is a key too
    assert list(seen.attributes) == sorted(seen.attributes)


def closed(*spans: Span) -> ClosedTrace:
    return ClosedTrace(trace_id=TRACE_ID, spans=spans, root_seen=True, closed_by="quiet",
                       span_count=len(spans), capped=0, first_offset=0)


def test_candidate_tells_an_answer_found_nowhere_from_an_empty_one() -> None:
    nowhere = chat(1, {"gen_ai.request.model": "gpt-4o-mini"})
    empty = chat(1, {"gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "parts": [{"type": "tool_call", "name": "search"}]}])})
    blank_value = span(1, None, {"openinference.span.kind": "LLM", "output.value": " "},
                       start=0, end=10)
    assert candidate(closed(nowhere)) == "no_answer_found"
    assert candidate(closed(empty)) == "empty_answer"
    assert candidate(closed(blank_value)) == "empty_answer"
