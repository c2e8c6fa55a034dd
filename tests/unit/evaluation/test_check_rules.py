"""`groundedness check` with several rules in `RULES`: one verdict line per trace and rule that
applies, a summary per rule, and no key needed without groundedness."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes

from consumer.cli import main
from tests.support.otel_spans import KIND
from tests.unit.evaluation.conftest import Judge, notes, verdict_lines
from tests.unit.evaluation.test_check_otlp import App, hex_trace_id, request_line

ALL_RULES = "groundedness,missing_citation,answered_without_tool"
DOCS = [{"id": "kb-1", "content": "Refunds are prorated to the day.",
         "metadata": {"title": "Refund Policy"}}]
MIXED: list[dict[str, Any]] = [
    # documents and tools: every rule applies
    {"trace_id": "both", "output": "Prorated to the day [1]. [[score=5]]",
     "retrieved_documents": DOCS, "tools_available": ["search_kb"],
     "tool_calls": [{"name": "search_kb"}]},
    # documents, no tools: no citation
    {"trace_id": "docs", "output": "Prorated to the day. [[score=4]]",
     "retrieved_documents": DOCS},
    # tools, no documents: answered from memory
    {"trace_id": "tools", "output": "It is sunny. [[score=2]]",
     "tools_available": ["get_weather"]},
    # neither: groundedness alone
    {"trace_id": "plain", "output": "Hello. [[score=5]]"},
    # no answer: nothing at all
    {"trace_id": "empty", "output": " ", "retrieved_documents": DOCS},
]


def write_traces(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def keyless(monkeypatch: pytest.MonkeyPatch, rules: str) -> None:
    """RULES without groundedness, and neither a key nor a threshold set."""
    monkeypatch.setenv("RULES", rules)
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("MIN_ACCEPTABLE_SCORE")


def test_a_mixed_file_gets_exactly_the_applicable_verdicts_in_rules_order(
    env: Judge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("RULES", ALL_RULES)
    path = write_traces(tmp_path / "mixed.jsonl", MIXED)

    code = main(["check", str(path)])

    captured = capsys.readouterr()
    found = [(v["trace_id"], v["rule"], v["verdict"]) for v in verdict_lines(captured.out)]
    assert found == [
        ("both", "groundedness", "pass"), ("both", "missing_citation", "pass"),
        ("both", "answered_without_tool", "pass"),
        ("docs", "groundedness", "pass"), ("docs", "missing_citation", "fail"),
        ("tools", "groundedness", "fail"), ("tools", "answered_without_tool", "fail"),
        ("plain", "groundedness", "pass"),
    ]
    ids = [v["verdict_id"] for v in verdict_lines(captured.out)]
    assert len(set(ids)) == len(ids), "one verdict id per trace and rule"
    assert notes(captured.err) == [
        "check: line 5: trace 'empty' has an empty output: not evaluated, no verdict"]
    assert captured.err.splitlines()[1:-1] == [
        "check: groundedness: 3 pass, 1 fail, 0 error",
        "check: missing_citation: 1 pass, 1 fail, 0 error, not applicable to 2 of 4 traces",
        "check: answered_without_tool: 1 pass, 1 fail, 0 error, "
        "not applicable to 2 of 4 traces",
        "check: left out: 1 empty output",
    ]
    assert captured.err.splitlines()[-1].startswith("check: judge: 4 verdicts, ")
    assert code == 0


def test_without_groundedness_no_key_is_needed_and_no_judge_is_called(
    env: Judge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    judge, _ = env
    keyless(monkeypatch, "missing_citation,answered_without_tool")
    path = write_traces(tmp_path / "mixed.jsonl", MIXED)

    code = main(["check", str(path)])

    captured = capsys.readouterr()
    verdicts = verdict_lines(captured.out)
    assert [(v["trace_id"], v["rule"]) for v in verdicts] == [
        ("both", "missing_citation"), ("both", "answered_without_tool"),
        ("docs", "missing_citation"), ("tools", "answered_without_tool")]
    assert all(v["judge_model"] is None and v["threshold"] is None for v in verdicts)
    assert captured.err.splitlines()[-3:] == [
        "check: missing_citation: 1 pass, 1 fail, 0 error, not applicable to 2 of 4 traces",
        "check: answered_without_tool: 1 pass, 1 fail, 0 error, "
        "not applicable to 2 of 4 traces",
        "check: left out: 1 empty output",  # and no judge line: nothing was judged
    ]
    assert judge.count() == 0
    assert code == 0


def test_otlp_spans_get_the_rules_that_apply_to_each_assembled_trace(
    env: Judge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    keyless(monkeypatch, "missing_citation,answered_without_tool")
    app = App()
    cited = app.ask("Who wrote Dune?", "Frank Herbert [1].")
    uncited = app.ask("Who wrote Emma?", "Jane Austen.")
    with app.tracer.start_as_current_span("agent") as agent:  # an agent that called a tool
        agent.set_attributes({KIND: OpenInferenceSpanKindValues.AGENT.value,
                              SpanAttributes.INPUT_VALUE: "Weather in Oslo?"})
        with app.tracer.start_as_current_span("get_weather") as tool:
            tool.set_attributes({KIND: OpenInferenceSpanKindValues.TOOL.value,
                                 SpanAttributes.TOOL_NAME: "get_weather"})
        with app.tracer.start_as_current_span("chat") as llm:
            llm.set_attribute(KIND, OpenInferenceSpanKindValues.LLM.value)
        agent.set_attribute(SpanAttributes.OUTPUT_VALUE, "Rain, 8 degrees.")
    agent_spans = app.recorder.spans()
    path = tmp_path / "spans.jsonl"
    path.write_text("".join(request_line(spans) + "\n"
                            for spans in (cited, uncited, agent_spans)))

    code = main(["check", str(path)])

    captured = capsys.readouterr()
    verdicts = verdict_lines(captured.out)
    assert [(v["trace_id"], v["rule"], v["verdict"]) for v in verdicts] == [
        (hex_trace_id(cited), "missing_citation", "pass"),
        (hex_trace_id(uncited), "missing_citation", "fail"),
        (hex_trace_id(agent_spans), "answered_without_tool", "pass"),
    ]
    assert all(v["assembly"]["closed_by"] == "quiet" for v in verdicts)
    assert notes(captured.err) == []
    assert code == 0
