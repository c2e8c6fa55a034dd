"""What ``groundedness eval`` writes: the table always, the JSON report only with ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from consumer.cli import main
from consumer.evaluation.labelled_rules import RULES_SAMPLE
from tests.unit.evaluation.conftest import Judge


def labelled(path: Path) -> Path:
    path.write_text("".join(
        json.dumps({"id": f"r{i}", "input": "Q?", "documents": ["D."],
                    "output": f"Answer {i}. {marker}", "label": label}) + "\n"
        for i, (label, marker) in enumerate([("grounded", "[[score=5]]"),
                                             ("ungrounded", "[[score=1]]")])))
    return path


@pytest.mark.parametrize("dataset", [pytest.param(labelled, id="labelled"),
                                     pytest.param(lambda _: RULES_SAMPLE, id="rules")])
def test_without_json_the_table_is_printed_and_no_file_written(
    env: Judge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], dataset: object,
) -> None:
    assert callable(dataset)
    path: Path = dataset(tmp_path / "labelled.jsonl")
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.iterdir())

    code = main(["eval", "--dataset", str(path)])

    assert code == 0
    assert "accuracy" in capsys.readouterr().out
    assert sorted(tmp_path.iterdir()) == before


def test_with_json_the_report_is_written_too(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.json"
    assert main(["eval", "--dataset", str(labelled(tmp_path / "l.jsonl")),
                 "--json", str(report)]) == 0
    assert json.loads(report.read_text())["count"] == 2
    assert "balanced accuracy" in capsys.readouterr().out
