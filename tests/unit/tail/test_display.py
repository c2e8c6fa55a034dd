"""What ``groundedness verdicts`` prints: JSON lines as published, the table's cells, the live
table's rows and counts, and one stderr line per record that is not a verdict."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from consumer.tail.display import JsonLines, LiveTable, json_line, row
from tests.support.published_verdicts import a_verdict, published


def test_a_json_line_is_the_verdict_as_published_on_one_line() -> None:
    verdict = json.loads(published(a_verdict("t-1", reason="line one\nline two — ü")))
    line = json_line(verdict)
    assert "\n" not in line
    assert json.loads(line) == verdict
    assert "ü" in line, "as text, not escaped"


def test_json_lines_go_to_stdout_and_what_is_skipped_to_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = io.StringIO()
    with JsonLines(out) as display:
        display.show(json.loads(published(a_verdict("t-1"))))
        display.skipped("partition 0 offset 3", "not JSON (Expecting value)")
        display.show(json.loads(published(a_verdict("t-2", outcome="fail"))))
        display.flush()
    assert [json.loads(line)["trace_id"] for line in out.getvalue().splitlines()] == [
        "t-1", "t-2"]
    assert capsys.readouterr().err == (
        "skipped partition 0 offset 3: not a verdict: not JSON (Expecting value)\n")


@pytest.mark.parametrize(("outcome", "cells"), [
    pytest.param("pass", ("2024-05-01 12:00:03", "groundedness", "pass", "1.00", "t-1",
                          "supported by [1]"), id="pass"),
    pytest.param("fail", ("2024-05-01 12:00:03", "groundedness", "fail", "0.25", "t-1",
                          "supported by [1]"), id="fail"),
    pytest.param("error", ("2024-05-01 12:00:03", "groundedness", "error", "-", "t-1",
                           "no answer in 30 s"), id="error-its-message"),
])
def test_a_row_shows_time_rule_verdict_score_trace_and_reason(outcome: str,
                                                              cells: tuple[str, ...]) -> None:
    verdict = json.loads(published(a_verdict("t-1", outcome=outcome)))  # type: ignore[arg-type]
    assert row(verdict) == cells


def test_a_reason_over_lines_is_one_line_and_a_missing_time_empty() -> None:
    verdict = json.loads(published(a_verdict("t-1", reason="first\n  second")))
    del verdict["evaluated_at"]
    assert row(verdict)[0] == ""
    assert row(verdict)[5] == "first second"


def test_the_live_table_keeps_what_fits_the_screen_and_counts_everything(
    capsys: pytest.CaptureFixture[str],
) -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=120, height=10,
                      record=True)
    with LiveTable("verdicts on v", console) as table:
        for i in range(6):
            table.show(json.loads(published(a_verdict(f"t-{i}", outcome=(
                "pass", "fail", "error")[i % 3]))))
        table.skipped("partition 1 offset 9", "no verdict_id")
        table.flush()
    text = console.export_text()
    final = text[text.rindex("verdicts on v"):]  # the last drawing
    assert [f"t-{i}" for i in range(6) if f" t-{i} " in final] == ["t-3", "t-4", "t-5"], \
        "the screen's 10 lines hold 3 rows"
    assert "6 shown (2 pass, 2 fail, 2 error); 1 not verdicts, skipped" in final
    assert "skipped partition 1 offset 9: not a verdict: no verdict_id" in capsys.readouterr().err


@pytest.mark.parametrize("trace_id", ["[/]", "[bold]abc", "[link=https://x.example]y[/link]"])
def test_a_producers_brackets_are_shown_as_written_never_read_as_markup(trace_id: str) -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=160, height=10,
                      record=True)
    verdict = json.loads(published(a_verdict("t")))
    verdict["trace_id"] = trace_id
    verdict["reason"] = "see [link=https://x.example]here[/link]"
    with LiveTable("verdicts on v", console) as table:
        table.show(verdict)
        table.flush()
    text = console.export_text()
    assert trace_id in text
    assert "[link=https://x.example]here[/link]" in text


def test_a_lone_surrogate_is_shown_escaped_not_a_crash() -> None:
    verdict = json.loads(published(a_verdict("t")))
    verdict["reason"] = "\ud800 lone"
    out = io.BytesIO()
    lines = JsonLines(io.TextIOWrapper(out, encoding="utf-8"))
    lines.show(verdict)
    lines.flush()
    line = out.getvalue().decode("utf-8")
    assert json.loads(line)["reason"] == "\ud800 lone", "still the verdict as published"
    assert "\\ud800" in line
    assert row(verdict)[-1] == "\\ud800 lone"
