"""trace_json events with the tools the rules read: what decodes, what is refused and why, and
that events without them read as before."""

from __future__ import annotations

import json
from typing import Any

import pytest
import structlog

from consumer.inputs.trace_json import decode_trace
from consumer.telemetry.mapped_trace import UNNAMED_TOOL


def decode(**fields: Any) -> Any:
    return decode_trace(json.dumps({"trace_id": "t", "output": "Done.", **fields}).encode())


def test_contract_fields_decode() -> None:
    trace = decode(tools_available=["lookup_order", "search_kb"], tool_calls=[
        {"name": "lookup_order", "arguments": {"order_id": "88123"},
         "result": {"status": "shipped"}},
        {"name": "search_kb", "arguments": '{"q": "returns"}', "result": "3 articles"},
    ])
    assert trace.tools_available == ["lookup_order", "search_kb"]
    assert [(c.name, c.arguments, c.result, c.failed) for c in trace.tool_calls or []] == [
        ("lookup_order", {"order_id": "88123"}, {"status": "shipped"}, False),
        ("search_kb", '{"q": "returns"}', "3 articles", False),
    ]


def test_worker_additions_decode() -> None:
    trace = decode(agent=True, tool_calls=[{"name": "lookup_order", "error": "timeout"}])
    assert trace.agent is True
    assert trace.tool_calls is not None
    assert trace.tool_calls[0].failed


def test_openai_shapes_are_read_as_names() -> None:
    trace = decode(
        tools_available=[{"type": "function", "function": {"name": "get_weather",
                                                            "parameters": {}}},
                         {"name": "search_web"}, "get_time"],
        tool_calls=[{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}],
    )
    assert trace.tools_available == ["get_weather", "search_web", "get_time"]
    assert trace.tool_calls is not None
    assert (trace.tool_calls[0].name, trace.tool_calls[0].arguments) == (
        "get_weather", '{"city": "Oslo"}')


def test_an_event_without_tools_is_unchanged() -> None:
    trace = decode()
    assert (trace.tools_available, trace.tool_calls, trace.agent) == (None, None, None)
    assert trace.model_dump(exclude_unset=True) == {"trace_id": "t", "output": "Done."}
    assert trace.model_dump(exclude_none=True) == {"trace_id": "t", "output": "Done."}


NAMELESS = [UNNAMED_TOOL]  # a call that ran, whatever it was called


@pytest.mark.usefixtures("default_structlog")
@pytest.mark.parametrize(
    ("fields", "where", "available", "calls"),
    [
        pytest.param({"tools_available": '["lookup_order"'},
                     "tools_available: Input should be a valid list", None, None,
                     id="malformed-json-text"),
        pytest.param({"tools_available": "lookup_order"},
                     "tools_available: Input should be a valid list", None, None,
                     id="one-name-not-a-list"),
        pytest.param({"tools_available": ["ok", 7]},
                     "tools_available.1: Input should be a valid string", ["ok"], None,
                     id="number-name-beside-a-good-one"),
        pytest.param({"tools_available": [{"type": "function", "function": {}}]},
                     "tools_available.0: Input should be a valid string", None, None,
                     id="definition-without-name"),
        pytest.param({"tools_available": ["  "]}, "tools_available.0: tool name is blank",
                     None, None, id="blank-name"),
        pytest.param({"tool_calls": {"name": "x"}}, "tool_calls: Input should be a valid list",
                     None, None, id="calls-not-a-list"),
        pytest.param({"tool_calls": ["lookup_order"]}, "tool_calls.0", None, None,
                     id="call-is-a-string"),
        pytest.param({"tool_calls": [{"name": "weather"}, 42]}, "tool_calls.1", None,
                     ["weather"], id="a-bad-call-beside-a-good-one"),
        pytest.param({"tool_calls": [{"name": "weather"}, {"name": 7}]}, "tool_calls.1",
                     None, ["weather", UNNAMED_TOOL], id="number-name-beside-a-good-call"),
        pytest.param({"tool_calls": [{"arguments": {"id": 1}}]},
                     "tool_calls.0", None, NAMELESS, id="call-without-name"),
        pytest.param({"tool_calls": [{"name": ""}]}, "tool_calls.0", None, NAMELESS,
                     id="call-with-empty-name"),
        pytest.param({"tool_calls": [{"name": None}]}, "tool_calls.0", None, NAMELESS,
                     id="call-with-null-name"),
        # Shapes producers sent under these names before the contract named them.
        pytest.param({"tools_available": [{"type": "file_search"}]}, "tools_available.0",
                     None, None, id="assistants-tool-without-name"),
        pytest.param({"tool_calls": [{"tool": "search", "tool_input": "x"}]},
                     "tool_calls.0", None, NAMELESS, id="langchain-agent-action"),
        pytest.param({"tools_available": "search,calculator"}, "tools_available", None, None,
                     id="comma-separated-names"),
    ],
)
def test_bad_tools_are_dropped_and_the_trace_judged(
    fields: dict[str, Any], where: str, available: list[str] | None, calls: list[str] | None
) -> None:
    # Producers sent fields of these names in shapes of their own: refusing them would
    # dead-letter traces that were judged before. One bad item costs only itself (one odd
    # tool must not hide the others from a rule), and a call without a usable name still ran.
    with structlog.testing.capture_logs() as logs:
        trace = decode(**fields)
    assert trace.output == "Done."
    assert trace.tools_available == available
    assert (None if trace.tool_calls is None else [c.name for c in trace.tool_calls]) == calls
    [dropped] = [log for log in logs if log["event"] == "trace_field_dropped"]
    assert where.startswith(dropped["field"])
    assert dropped["problem"]


@pytest.mark.usefixtures("default_structlog")
@pytest.mark.parametrize("value", ["support-bot", {"name": "planner"}, 1, "true"])
def test_agent_that_is_not_a_boolean_is_dropped_and_the_trace_judged(value: Any) -> None:
    # "agent" is no name of the contract's first version: a producer may already send one.
    with structlog.testing.capture_logs() as logs:
        trace = decode(agent=value)
    assert trace.agent is None
    assert trace.output == "Done."
    assert [(log["event"], log["field"]) for log in logs] == [("trace_field_dropped", "agent")]
