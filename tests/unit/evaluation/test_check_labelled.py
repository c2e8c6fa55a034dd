"""``groundedness check`` on ``eval``'s labelled rows (``id``, ``input``, ``documents``,
``output``, ``label``), the bundled sample's format: each row a trace, its label in metadata."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from consumer.cli import main
from consumer.jsonl import LABELLED_SAMPLE
from tests.unit.evaluation.conftest import Judge, notes, verdict_lines


def test_the_bundled_sample_gets_a_verdict_per_row_and_its_summary(
    env: Judge, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [json.loads(line) for line in LABELLED_SAMPLE.read_text("utf-8").splitlines()]

    code = main(["check", str(LABELLED_SAMPLE)])

    captured = capsys.readouterr()
    verdicts = verdict_lines(captured.out)
    assert len(verdicts) == len(rows) == 514
    assert [v["trace_id"] for v in verdicts] == [row["id"] for row in rows]
    assert notes(captured.err) == []
    assert captured.err.splitlines()[0] == "check: groundedness: 514 pass, 0 fail, 0 error"
    assert code == 0


@pytest.mark.parametrize("options", [pytest.param((), id="auto"),
                                     pytest.param(("--format", "labelled"), id="labelled")])
def test_labelled_rows_are_traces_and_a_bad_row_is_named_by_its_line(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str], options: tuple[str, ...]
) -> None:
    judge, _ = env
    path = tmp_path / "labelled.jsonl"
    path.write_text("\n".join([
        json.dumps({"id": "r1", "input": "Capital of France?", "documents": ["Paris is."],
                    "output": "Paris. [[score=5]]", "label": "grounded"}),
        json.dumps({"id": "r2", "input": "Q?", "documents": ["D."], "output": "Made up.",
                    "label": "maybe"}),
        json.dumps({"id": "r3", "documents": [], "output": "Unsupported. [[score=1]]",
                    "label": "ungrounded"}),
    ]) + "\n")

    code = main(["check", *options, str(path)])

    captured = capsys.readouterr()
    verdicts = verdict_lines(captured.out)
    assert [(v["trace_id"], v["verdict"]) for v in verdicts] == [("r1", "pass"), ("r3", "fail")]
    assert notes(captured.err) == [
        "check: line 2: label must be grounded or ungrounded, got 'maybe'"]
    assert code == 1  # a row that could not be read, as for a trace event
    (paris,) = judge.calls_for("Paris.")
    assert "Paris is." in json.dumps(paris.request)  # its documents went to the judge


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_long_file_shows_a_bar_on_a_terminal_and_the_verdicts_still_go_to_stdout(
    env: Judge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps({"trace_id": f"t{i}", "output": "Fine. [[score=5]]"})
                            + "\n" for i in range(30)))
    out, err = io.StringIO(), Terminal()  # check FILE > out.txt, run from a terminal
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)

    code = main(["check", str(path)])

    assert code == 0
    assert [v["trace_id"] for v in verdict_lines(out.getvalue())] == [f"t{i}" for i in range(30)]
    assert "30/30" in err.getvalue()  # the bar
    assert "check: groundedness: 30 pass, 0 fail, 0 error" in err.getvalue()
