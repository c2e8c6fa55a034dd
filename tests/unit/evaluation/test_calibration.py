"""The eval metrics against values worked out by hand (positive class = ungrounded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from consumer.cli import main
from consumer.evaluation.calibration import (
    Confusion,
    Threshold,
    best_threshold,
    confusion,
    percentile,
    roc_auc,
)
from consumer.localjudge.server import JudgeServer
from tests.support.fake_judge import ScriptedJudge

U, G = True, False  # label: ungrounded (positive), grounded
FAIL, PASS = True, False  # verdict


def test_confusion_counts_each_cell() -> None:
    labels = [U, U, U, U, U, G, G, G, G, G]
    verdicts = [FAIL, FAIL, FAIL, PASS, PASS, FAIL, PASS, PASS, PASS, PASS]
    assert confusion(labels, verdicts) == Confusion(tp=3, fp=1, fn=2, tn=4)


@pytest.mark.parametrize(
    ("cells", "precision", "recall", "f1", "balanced"),
    [
        # 3/(3+1); 3/(3+2); 2*3/(2*3+1+2) = 6/9; (3/5 + 4/5) / 2
        pytest.param(Confusion(3, 1, 2, 4), 0.75, 0.6, 6 / 9, 0.7, id="mixed"),
        pytest.param(Confusion(5, 0, 0, 5), 1.0, 1.0, 1.0, 1.0, id="perfect"),
        pytest.param(Confusion(0, 5, 5, 0), 0.0, 0.0, 0.0, 0.0, id="inverted"),
        # Everything judged pass: no fail predicted, so precision is undefined.
        pytest.param(Confusion(0, 0, 4, 6), None, 0.0, 0.0, 0.5, id="never-fails"),
        # Only ungrounded traces: specificity, hence balanced accuracy, is undefined.
        pytest.param(Confusion(2, 0, 2, 0), 1.0, 0.5, 4 / 6, None, id="one-class"),
    ],
)
def test_confusion_metrics(
    cells: Confusion, precision: float | None, recall: float | None, f1: float | None,
    balanced: float | None,
) -> None:
    assert cells.precision == pytest.approx(precision)
    assert cells.recall == pytest.approx(recall)
    assert cells.f1 == pytest.approx(f1)
    assert cells.balanced_accuracy == pytest.approx(balanced)


def test_matrix_rows_are_labels_and_columns_verdicts() -> None:
    assert Confusion(tp=3, fp=1, fn=2, tn=4).as_matrix() == {
        "ungrounded": {"fail": 3, "pass": 2},
        "grounded": {"fail": 1, "pass": 4},
    }


@pytest.mark.parametrize(
    ("positive", "risk", "auc"),
    [
        pytest.param([U, U, G, G], [0.9, 0.8, 0.2, 0.1], 1.0, id="perfect"),
        pytest.param([U, U, G, G], [0.1, 0.2, 0.8, 0.9], 0.0, id="inverted"),
        pytest.param([U, G, U, G], [0.5, 0.5, 0.5, 0.5], 0.5, id="all-tied"),
        # Pairs (pos, neg): (.9,.5)=1 (.9,.1)=1 (.5,.5)=1/2 (.5,.1)=1 (.5,.5)=1/2 (.5,.1)=1
        pytest.param([U, U, U, G, G], [0.9, 0.5, 0.5, 0.5, 0.1], 5 / 6, id="ties-count-half"),
        # Pairs: (.7,.3)=1 (.7,.7)=1/2 (.3,.3)=1/2 (.3,.7)=0
        pytest.param([U, G, U, G], [0.7, 0.3, 0.3, 0.7], 0.5, id="crossed-ties"),
        # Pairs: (.6,.4)=1 (.6,.8)=0 (.6,.2)=1 -> 2/3
        pytest.param([G, U, G, G], [0.4, 0.6, 0.8, 0.2], 2 / 3, id="one-positive"),
    ],
)
def test_roc_auc_is_the_mann_whitney_statistic(
    positive: list[bool], risk: list[float], auc: float
) -> None:
    assert roc_auc(positive, risk) == pytest.approx(auc)


@pytest.mark.parametrize(
    "positive", [pytest.param([U, U], id="no-negative"), pytest.param([G, G], id="no-positive"),
                 pytest.param([], id="empty")],
)
def test_roc_auc_needs_both_classes(positive: list[bool]) -> None:
    assert roc_auc(positive, [0.5] * len(positive)) is None


@pytest.mark.parametrize(
    ("ungrounded", "scores", "best"),
    [
        # t=0: BA 1/2; t=.25: (1/3+1)/2; t=.5: (2/3+1)/2; t=.75: (1+2/3)/2 (tie, higher);
        # t=1: (1+1/3)/2. The tie at 5/6 goes to the lower threshold.
        pytest.param([U, U, U, G, G, G], [0.0, 0.25, 0.5, 0.5, 0.75, 1.0],
                     Threshold(0.5, 5 / 6), id="tie-goes-to-lowest"),
        # Separable: failing everything below .75 is perfect.
        pytest.param([U, U, G, G], [0.0, 0.25, 0.75, 1.0], Threshold(0.75, 1.0),
                     id="separable"),
        # Inverted scores: no cut beats "everything passes" (BA 1/2 at the lowest score).
        pytest.param([U, U, G, G], [1.0, 0.75, 0.25, 0.0], Threshold(0.0, 0.5), id="inverted"),
    ],
)
def test_best_threshold_searches_the_distinct_scores(
    ungrounded: list[bool], scores: list[float], best: Threshold
) -> None:
    found = best_threshold(ungrounded, scores)
    assert found is not None
    assert found.threshold == best.threshold
    assert found.balanced_accuracy == pytest.approx(best.balanced_accuracy)


def test_best_threshold_is_undefined_for_one_class() -> None:
    assert best_threshold([U, U], [0.25, 0.75]) is None
    assert best_threshold([], []) is None


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        pytest.param([15, 20, 35, 40, 50], 50, 35, id="median-odd"),
        pytest.param([15, 20, 35, 40, 50], 95, 50, id="p95-small"),
        pytest.param(list(range(1, 101)), 95, 95, id="p95-hundred"),
        pytest.param([7], 50, 7, id="single"),
        pytest.param([], 50, None, id="empty"),
    ],
)
def test_percentile_is_nearest_rank(values: list[float], q: float, expected: float | None) -> None:
    assert percentile(values, q) == expected


def test_mismatched_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="2 labels but 1 predictions"):
        confusion([U, G], [FAIL])


def test_eval_command_reports_hand_computed_metrics_and_draws_the_plot(
    fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    _, server = fake_judge
    for name, value in {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": server.url,
                        "MIN_ACCEPTABLE_SCORE": "0.5", "JUDGE_MODEL": "scripted-judge",
                        "LOG_LEVEL": "warning"}.items():
        monkeypatch.setenv(name, value)
    rows = [  # (label, scripted raw score or marker) -> score = (raw - 1) / 4
        ("ungrounded", "[[score=1]]"), ("ungrounded", "[[score=1]]"),
        ("ungrounded", "[[score=3]]"), ("grounded", "[[score=5]]"), ("grounded", "[[score=5]]"),
        ("grounded", "[[score=2]]"), ("grounded", "[[garbage]]"), ("grounded", ""),
    ]
    dataset = tmp_path / "labelled.jsonl"
    dataset.write_text("".join(
        json.dumps({"id": f"r{i}", "input": "Q?", "documents": ["D."],
                    "output": f"Answer {i}. {marker}" if marker else "", "label": label}) + "\n"
        for i, (label, marker) in enumerate(rows)))
    report_path, plot_path = tmp_path / "eval.json", tmp_path / "eval.png"

    code = main(["eval", "--dataset", str(dataset), "--json", str(report_path),
                 "--plot", str(plot_path)])

    assert code == 0
    report = json.loads(report_path.read_text())
    # Scores: ungrounded 0, 0, .5; grounded 1, 1, .25. At 0.5: tp=2 fn=1 fp=1 tn=2.
    assert (report["rows"], report["count"], report["errors"], report["skipped"]) == (8, 6, 1, 1)
    assert report["confusion"] == {"ungrounded": {"fail": 2, "pass": 1},
                                   "grounded": {"fail": 1, "pass": 2}}
    for key in ("balanced_accuracy", "precision", "recall", "f1"):
        assert report[key] == pytest.approx(2 / 3), key
    # Risk 1 - score: ungrounded 1, 1, .5 vs grounded 0, 0, .75 -> 8 of 9 pairs ordered.
    assert report["roc_auc"] == pytest.approx(8 / 9)
    # t=.25 and t=1 both reach (2/3 + 1)/2 and (1 + 2/3)/2 = 5/6; the lower one wins.
    assert report["best_threshold"] == 0.25
    assert report["best_threshold_balanced_accuracy"] == pytest.approx(5 / 6)
    assert plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "balanced accuracy" in capsys.readouterr().out


def test_eval_refuses_a_bad_label_with_its_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    dataset = tmp_path / "bad.jsonl"
    dataset.write_text('{"output": "x", "label": "grounded"}\n{"output": "y", "label": "maybe"}\n')
    assert main(["eval", "--dataset", str(dataset), "--json", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"--dataset: {dataset}:2: label must be grounded or ungrounded")
