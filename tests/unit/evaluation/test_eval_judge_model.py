"""``eval`` is of the model that answered: with the local judge and the default ``JUDGE_MODEL``
its table, its report and the rules' report name the local judge, not ``gpt-4o-mini``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from consumer.cli import main
from consumer.localjudge.responder import MODEL, local_judge_server
from tests.support.workers import worker_env

DOCUMENTS = ["Paris is the capital of France."]


@pytest.fixture
def local_judge(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The worker's settings pointed at the local judge, ``JUDGE_MODEL`` left at its default."""
    with local_judge_server(port=0) as server:
        for name, value in worker_env({}, server.url).items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("JUDGE_MODEL")
        yield


def run_eval(tmp_path: Path, rows: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows))
    report = tmp_path / "report.json"
    code = main(["eval", "--dataset", str(dataset), "--json", str(report)])
    return code, json.loads(report.read_text())


@pytest.mark.usefixtures("local_judge")
def test_the_eval_table_names_the_model_that_answered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = run_eval(tmp_path, [
        {"id": "a", "input": "Capital?", "documents": DOCUMENTS, "output": DOCUMENTS[0],
         "label": "grounded"},
        {"id": "b", "input": "Capital?", "documents": DOCUMENTS,
         "output": "Lyon has 9 million people.", "label": "ungrounded"},
    ])
    assert code == 0
    assert (report["judge_model"], report["judge_model_asked"]) == (MODEL, "gpt-4o-mini")
    out = " ".join(capsys.readouterr().out.split())
    assert f"eval of {MODEL} (JUDGE_MODEL gpt-4o-mini) on" in out
    assert "eval of gpt-4o-mini" not in out


@pytest.mark.usefixtures("local_judge")
def test_the_rules_report_names_the_model_that_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RULES", "groundedness,missing_citation")
    code, report = run_eval(tmp_path, [
        {"trace_id": "a", "output": DOCUMENTS[0], "retrieved_documents": DOCUMENTS,
         "labels": {"groundedness": "pass", "missing_citation": "fail"}},
    ])
    assert code == 0
    assert report["judge_model"] == MODEL
