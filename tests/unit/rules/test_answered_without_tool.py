"""answered_without_tool@v1: a model with tools that answered without calling one."""

from __future__ import annotations

from typing import Any

import pytest

from consumer.rules.answered_without_tool import AnsweredWithoutTool
from schemas.trace import TraceEvent

RULE = AnsweredWithoutTool()
ANSWER = "Your order 88123 shipped yesterday and arrives Friday."


def trace(output: str | None = ANSWER, **fields: Any) -> TraceEvent:
    return TraceEvent.model_validate({"trace_id": "t", "output": output, **fields})


@pytest.mark.parametrize(
    ("event", "applies"),
    [
        pytest.param(trace(tools_available=["lookup_order"]), True, id="tools-offered"),
        pytest.param(trace(tool_calls=[{"name": "lookup_order"}]), True,
                     id="a-call-without-a-tool-list"),
        pytest.param(trace(agent=True), True, id="an-agent-with-no-tools-listed"),
        pytest.param(trace(), False, id="plain-chat"),
        pytest.param(trace(tools_available=[], tool_calls=[], agent=False), False,
                     id="empty-lists-and-no-agent"),
        pytest.param(trace(None, tools_available=["lookup_order"]), False, id="no-answer"),
        pytest.param(trace("  ", agent=True), False, id="blank-answer"),
    ],
)
def test_applies_where_the_model_had_tools(event: TraceEvent, applies: bool) -> None:
    assert RULE.applies(event, None) is applies


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        pytest.param({"tools_available": ["lookup_order", "create_return"],
                      "tool_calls": [{"name": "lookup_order", "arguments": {"id": "88123"},
                                      "result": {"status": "shipped"}}]},
                     "made 1 tool call: lookup_order", id="one-call"),
        pytest.param({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}},
                                     {"name": "get_weather", "arguments": {"city": "Bergen"}},
                                     {"name": "compare"}]},
                     "made 3 tool calls: get_weather, compare", id="names-once-each"),
        pytest.param({"agent": True, "tool_calls": [
            {"name": "lookup_order", "error": "UpstreamTimeout: orders-api, 10 s"}]},
                     "made 1 tool call: lookup_order; 1 failed: lookup_order "
                     "(UpstreamTimeout: orders-api, 10 s)", id="the-only-call-failed"),
        pytest.param({"tool_calls": [
            {"name": "search", "result": "3 hits"},
            {"name": "fetch", "error": {"type": "HTTPError", "status": 503}}]},
                     'made 2 tool calls: search, fetch; 1 failed: fetch '
                     '({"status": 503, "type": "HTTPError"})', id="structured-error"),
        pytest.param({"tool_calls": [{"name": "search", "error": False},
                                     {"name": "fetch", "error": ""}]},
                     "made 2 tool calls: search, fetch", id="falsy-error-is-no-failure"),
        pytest.param({"tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "convert_currency", "arguments": '{"amount": 250}'}}]},
                     "made 1 tool call: convert_currency", id="openai-shaped-call"),
    ],
)
def test_a_tool_call_passes_naming_it(fields: dict[str, Any], reason: str) -> None:
    outcome = RULE.check(trace(**fields), None)
    assert (outcome.passed, outcome.score) == (True, 1.0)
    assert outcome.reason == reason


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        pytest.param({"tools_available": ["lookup_order"]},
                     "answered without calling a tool; 1 was available: lookup_order",
                     id="one-tool"),
        pytest.param({"tools_available": ["lookup_order", "search_kb", "lookup_order"],
                      "agent": True},
                     "answered without calling a tool; 2 were available: lookup_order, "
                     "search_kb", id="duplicates-named-once"),
        pytest.param({"tools_available": [{"type": "function",
                                           "function": {"name": "jira_search"}}]},
                     "answered without calling a tool; 1 was available: jira_search",
                     id="definitions-as-names"),
        pytest.param({"agent": True, "tool_calls": []},
                     "an agent answered without calling a tool (the trace does not list its "
                     "tools)", id="agent-without-a-tool-list"),
    ],
)
def test_no_tool_call_fails_naming_the_tools(fields: dict[str, Any], reason: str) -> None:
    outcome = RULE.check(trace(**fields), None)
    assert (outcome.passed, outcome.score) == (False, 0.0)
    assert outcome.reason == reason


def test_many_tools_are_named_up_to_ten() -> None:
    names = [f"tool_{n}" for n in range(14)]
    outcome = RULE.check(trace(tools_available=names), None)
    assert outcome.reason.endswith("tool_8, tool_9 and 4 more")
    assert "tool_10" not in outcome.reason


def test_huge_names_and_errors_are_cut() -> None:
    outcome = RULE.check(trace(tool_calls=[{"name": "n" * 10_000, "error": "e" * 10_000}]), None)
    assert outcome.passed
    assert len(outcome.reason) < 300


def test_rule_is_named_and_versioned() -> None:
    assert (RULE.name, RULE.version) == ("answered_without_tool", "v1")
