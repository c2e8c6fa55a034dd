"""`groundedness eval` on labels per rule (`--format rules`, the bundled rules sample): each
rule's agreement with its labels, no judge unless groundedness is both in RULES and labelled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from consumer.cli import main
from consumer.evaluation.labelled_rules import RULES_SAMPLE
from consumer.rules.base import rule_id
from consumer.rules.registry import REGISTRY, RuleOptions
from tests.unit.evaluation.conftest import Judge

DETERMINISTIC = ("missing_citation", "answered_without_tool")


def run_eval(tmp_path: Path, dataset: Path, *options: str) -> tuple[int, dict[str, Any]]:
    report_path = tmp_path / "eval.json"
    report_path.unlink(missing_ok=True)
    code = main(["eval", "--dataset", str(dataset), "--json", str(report_path), *options])
    return code, json.loads(report_path.read_text()) if report_path.exists() else {}


def sample_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in RULES_SAMPLE.read_text(encoding="utf-8").splitlines()]


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def keyless(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither a key nor a threshold: the deterministic rules need neither."""
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("MIN_ACCEPTABLE_SCORE")


@pytest.mark.parametrize("options", [pytest.param((), id="format-from-the-file"),
                                     pytest.param(("--format", "rules"), id="format-rules")])
def test_the_rules_agree_with_every_label_of_the_sample_without_a_judge(
    env: Judge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], options: tuple[str, ...],
) -> None:
    judge, _ = env
    keyless(monkeypatch)  # RULES unset: groundedness, which the sample does not label

    code, report = run_eval(tmp_path, RULES_SAMPLE, *options)

    assert code == 0
    rows = len(sample_rows())
    assert (report["format"], report["rows"], report["rules_run"]) == (
        "rules", rows, list(DETERMINISTIC))
    assert report["rules_without_labels"] == ["groundedness"]
    for name in DETERMINISTIC:
        rule = report["rules"][name]
        version = rule_id(REGISTRY[name](RuleOptions()))
        assert (rule["version"], rule["labelled"], rule["agree"]) == (version, rows, rows)
        assert rule["accuracy"] == rule["applies_accuracy"] == 1.0
        assert rule["disagreements"] == []
        cells = rule["confusion"]
        assert all(cells[label][found] == 0 for label in cells for found in cells[label]
                   if found != label)
        assert min(cells[label][label] for label in cells) > 0, "each label occurs"
    out = capsys.readouterr().out
    assert "missing_citation@v2" in out
    assert "100.0%" in out
    assert judge.count() == 0


def test_a_wrong_label_shows_up_as_a_disagreement(
    env: Judge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    keyless(monkeypatch)
    rows = sample_rows()
    cited = next(row for row in rows if row["labels"]["missing_citation"] == "pass")
    cited["labels"]["missing_citation"] = "fail"  # wrong: the answer cites
    toolless = next(row for row in rows
                    if row["labels"]["answered_without_tool"] == "not_applicable")
    toolless["labels"]["answered_without_tool"] = "pass"  # wrong: it had no tools
    path = write_rows(tmp_path / "wrong.jsonl", rows)

    code, report = run_eval(tmp_path, path, "--format", "rules")

    assert code == 0
    citation = report["rules"]["missing_citation"]
    assert citation["agree"] == len(rows) - 1
    assert citation["applies_accuracy"] == 1.0, "it applies as labelled; only the verdict differs"
    assert citation["confusion"]["fail"]["pass"] == 1
    (wrong,) = citation["disagreements"]
    assert (wrong["trace_id"], wrong["label"], wrong["found"]) == (
        cited["trace_id"], "fail", "pass")
    assert "citation marker" in wrong["reason"]
    tools = report["rules"]["answered_without_tool"]
    assert tools["confusion"]["pass"]["not_applicable"] == 1
    assert tools["applies_accuracy"] == pytest.approx((len(rows) - 1) / len(rows))
    (wrong,) = tools["disagreements"]
    assert (wrong["trace_id"], wrong["found"], wrong["reason"]) == (
        toolless["trace_id"], "not_applicable", None)
    out = capsys.readouterr().out
    assert "disagreements" in out
    assert cited["trace_id"] in out


def test_groundedness_labels_are_judged_when_rules_names_groundedness(
    env: Judge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    judge, _ = env
    monkeypatch.setenv("RULES", "groundedness,missing_citation")
    docs = [{"id": "kb-1", "content": "Refunds are prorated."}]
    path = write_rows(tmp_path / "g.jsonl", [
        {"trace_id": "g1", "output": "Prorated [1]. [[score=5]]", "retrieved_documents": docs,
         "labels": {"groundedness": "pass", "missing_citation": "pass"}},
        {"trace_id": "g2", "output": "Full refund. [[score=1]]", "retrieved_documents": docs,
         "labels": {"groundedness": "pass", "missing_citation": "fail"}},  # judged fail
        {"trace_id": "g3", "output": "No idea.", "labels": {"missing_citation": "not_applicable"}},
    ])

    code, report = run_eval(tmp_path, path)

    assert code == 0
    assert report["rules_run"] == ["groundedness", "missing_citation"]
    assert (report["judge_model"], report["threshold"]) == ("scripted-judge", 0.5)
    grounded = report["rules"]["groundedness"]
    assert (grounded["labelled"], grounded["agree"]) == (2, 1), "g3 has no groundedness label"
    assert [row["trace_id"] for row in grounded["disagreements"]] == ["g2"]
    assert report["rules"]["missing_citation"]["agree"] == 3
    assert judge.count() == 3, "the judge is asked about every trace with an answer"


def test_groundedness_labels_without_a_threshold_are_refused(
    env: Judge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    judge, _ = env
    monkeypatch.delenv("MIN_ACCEPTABLE_SCORE")
    path = write_rows(tmp_path / "g.jsonl", [
        {"trace_id": "g1", "output": "Yes.", "labels": {"groundedness": "pass"}}])

    code, _ = run_eval(tmp_path, path)

    assert code == 2
    assert capsys.readouterr().err == (
        "Minimum acceptable score is required. Set MIN_ACCEPTABLE_SCORE to a number from 0 to 1.\n")
    assert judge.count() == 0


@pytest.mark.parametrize(
    ("rows", "options", "message"),
    [
        pytest.param([{"trace_id": "x", "output": "A.", "labels": {"missing_citations": "pass"}}],
                     (), "labels unknown rule 'missing_citations'", id="unknown-rule"),
        pytest.param([{"trace_id": "x", "output": "A.", "labels": {"missing_citation": "ok"}}],
                     (), ":1: labels must map rule names to one of", id="bad-label"),
        pytest.param([{"trace_id": "x", "output": "A.", "labels": {"groundedness": "pass"}}],
                     (), "RULES (missing_citation) does not name it", id="nothing-to-run"),
        pytest.param([{"trace_id": "x", "output": "A.", "labels": {"missing_citation": "pass"}}],
                     ("--format", "labelled"), "read it with --format rules", id="labelled"),
        pytest.param([{"input": "Q?", "documents": ["D."], "output": "A.", "label": "grounded"}],
                     (), "RULES (missing_citation) does not name groundedness",
                     id="groundedness-set-without-groundedness"),
    ],
)
def test_a_dataset_that_cannot_be_measured_is_refused_in_one_line(
    env: Judge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], rows: list[dict[str, Any]], options: tuple[str, ...],
    message: str,
) -> None:
    judge, _ = env
    monkeypatch.setenv("RULES", "missing_citation")
    path = write_rows(tmp_path / "d.jsonl", rows)

    code, report = run_eval(tmp_path, path, *options)

    err = capsys.readouterr().err
    assert (code, report) == (2, {})
    assert err.count("\n") == 1, err
    assert message in err
    assert judge.count() == 0
