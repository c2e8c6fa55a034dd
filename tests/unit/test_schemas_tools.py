"""The trace event's tool fields in its JSON Schema: the contract's names, all optional."""

from __future__ import annotations

from schemas.generate import MODELS


def test_tool_fields_are_optional_in_the_trace_schema() -> None:
    schema = MODELS["trace.schema.json"].model_json_schema()
    assert {"tools_available", "tool_calls", "agent"} <= set(schema["properties"])
    assert schema["required"] == ["trace_id"]
    call = schema["$defs"]["ToolCall"]
    assert call["required"] == ["name"]
    assert {"name", "arguments", "result", "error"} == set(call["properties"])
