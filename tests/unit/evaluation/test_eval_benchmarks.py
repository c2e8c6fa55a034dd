"""`groundedness eval --format aggrefact|halubench` through the real command against the fake
judge, on small files written as the benchmarks publish them (Parquet) or as users export them
(CSV, JSON lines, a JSON array).

The fake judge scores an answer by the marker in it (none: 5, pass; ``[[score=1]]``: fail;
``[[garbage]]``: an error verdict), so every figure below is counted by hand.
"""

from __future__ import annotations

import csv
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from consumer.cli import _parser, main
from consumer.evaluation.benchmarks.scores import matches_judge
from consumer.evaluation.benchmarks.sets import AGGREFACT, BENCHMARKS, HALUBENCH, Published
from consumer.evaluation.judge_eval import read_dataset
from consumer.judge.prompt import read_data
from tests.unit.evaluation.conftest import Judge

FAIL = " [[score=1]]"
DOC = "The council met on Monday.\nIt approved the new bridge, which opens in May."

# LLM-AggreFact: label 1 = supported. Per dataset (ungrounded = label 0 is the positive class):
#   AggreFact-CNN: supported 1 pass + 1 fail, unsupported 2 fail (+1 error, left out)
#                  -> (1/2 + 2/2) / 2 = 0.75
#   Wice:          supported 1 pass, unsupported 1 pass (+1 empty claim, skipped) -> 0.5
#   Reveal:        supported only -> undefined, named and left out of the mean
# Mean of the two = 0.625. Pooled: unsupported 2 of 3 judged fail, supported 3 of 4 judged
# pass -> (2/3 + 3/4) / 2 = 17/24.
AGGREFACT_ROWS: list[dict[str, Any]] = [
    {"dataset": "AggreFact-CNN", "doc": DOC, "claim": "The council approved a bridge.",
     "label": 1},
    {"dataset": "AggreFact-CNN", "doc": DOC, "claim": "The bridge opens in May." + FAIL,
     "label": 1},
    {"dataset": "AggreFact-CNN", "doc": DOC, "claim": "The council met on Friday." + FAIL,
     "label": 0},
    {"dataset": "AggreFact-CNN", "doc": DOC, "claim": "The bridge was rejected." + FAIL,
     "label": 0},
    {"dataset": "AggreFact-CNN", "doc": DOC, "claim": "It costs 4 million. [[garbage]]",
     "label": 0},
    {"dataset": "Wice", "doc": DOC, "claim": "The council met on Monday.", "label": 1},
    {"dataset": "Wice", "doc": DOC, "claim": "The mayor cut the ribbon.", "label": 0},
    {"dataset": "Wice", "doc": DOC, "claim": "", "label": 1},
    {"dataset": "Reveal", "doc": DOC, "claim": "A new bridge was approved.", "label": 1},
]

# HaluBench: PASS = faithful. DROP: 3 of 4 right (a faithful answer judged fail); halueval:
# 2 of 2. Mean of the two sources = 0.875; pooled 5 of 6.
HALUBENCH_ROWS: list[dict[str, Any]] = [
    {"id": "drop-1", "passage": DOC, "question": "When did the council meet?",
     "answer": "On Monday.", "label": "PASS", "source_ds": "DROP"},
    {"id": "drop-2", "passage": DOC, "question": "When does the bridge open?",
     "answer": "In May." + FAIL, "label": "PASS", "source_ds": "DROP"},
    {"id": "drop-3", "passage": DOC, "question": "When does the bridge open?",
     "answer": "In June." + FAIL, "label": "FAIL", "source_ds": "DROP"},
    {"id": "drop-4", "passage": DOC, "question": "What was approved?",
     "answer": "A tunnel." + FAIL, "label": "FAIL", "source_ds": "DROP"},
    {"id": "halu-1", "passage": DOC, "question": "Who met?",
     "answer": "The mayor alone." + FAIL, "label": "FAIL", "source_ds": "halueval"},
    {"id": "halu-2", "passage": DOC, "question": "What opens in May?",
     "answer": "The new bridge.", "label": "PASS", "source_ds": "halueval"},
]


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    """``rows`` in the format the file's suffix names, as the benchmarks' files and the usual
    exports write them."""
    if path.suffix == ".parquet":
        pyarrow: Any = importlib.import_module("pyarrow")
        parquet: Any = importlib.import_module("pyarrow.parquet")
        parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    elif path.suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as file:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def run_eval(path: Path, dataset_format: str, tmp_path: Path) -> tuple[int, dict[str, Any]]:
    report_path = tmp_path / "eval.json"
    code = main(["eval", "--format", dataset_format, "--dataset", str(path),
                 "--json", str(report_path)])
    return code, json.loads(report_path.read_text()) if report_path.exists() else {}


SUFFIXES = [".parquet", ".csv", ".jsonl", ".json"]


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_aggrefact_balanced_accuracy_per_dataset_and_their_mean(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    path = write(tmp_path / f"test-00000-of-00001{suffix}", AGGREFACT_ROWS)

    code, report = run_eval(path, "aggrefact", tmp_path)

    assert code == 0
    bench = report["benchmark"]
    assert (bench["name"], bench["metric"], bench["group_column"]) == (
        "LLM-AggreFact", "balanced_accuracy", "dataset")
    assert bench["groups"] == {
        "AggreFact-CNN": {"count": 4, "errors": 1, "skipped": 0, "value": 0.75},
        "Reveal": {"count": 1, "errors": 0, "skipped": 0, "value": None},
        "Wice": {"count": 2, "errors": 0, "skipped": 1, "value": 0.5},
    }
    assert bench["value"] == pytest.approx(0.625)
    assert bench["groups_averaged"] == 2
    assert bench["groups_without_value"] == ["Reveal"]
    assert bench["pooled"] == pytest.approx(17 / 24)
    # The usual metrics are there too, over the same judged rows: the pooled figure.
    assert report["balanced_accuracy"] == pytest.approx(17 / 24)
    assert (report["rows"], report["count"], report["errors"], report["skipped"]) == (9, 7, 1, 1)
    assert [(p["model"], p["value"], p["matches_judge"]) for p in bench["published"]] == [
        ("gpt-4o-2024-05-13", 0.759, False), ("gpt-4o-mini-2024-07-18", 0.740, False)]
    out = capsys.readouterr().out
    assert "LLM-AggreFact: balanced accuracy of scripted-judge" in out
    assert "62.5" in out  # this judge's mean, beside gpt-4o's published mean
    assert "75.9" in out
    assert "same model" not in out
    assert "not averaged (one label only): Reveal" in out
    assert "the published means are over 11 dataset values; this file has 3 of them" in out


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_halubench_accuracy_per_source_and_their_mean(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    path = write(tmp_path / f"halubench{suffix}", HALUBENCH_ROWS)

    code, report = run_eval(path, "halubench", tmp_path)

    assert code == 0
    bench = report["benchmark"]
    assert (bench["metric"], bench["group_column"]) == ("accuracy", "source_ds")
    assert {name: group["value"] for name, group in bench["groups"].items()} == {
        "DROP": 0.75, "halueval": 1.0}
    assert bench["value"] == pytest.approx(0.875)
    assert bench["pooled"] == pytest.approx(5 / 6)
    assert [(p["model"], p["value"]) for p in bench["published"]] == [("gpt-4o", 0.865)]
    assert "86.5" in capsys.readouterr().out


def test_a_halubench_row_reaches_the_judge_as_question_passage_and_answer(
    env: Judge, tmp_path: Path
) -> None:
    judge, _ = env
    path = write(tmp_path / "halubench.parquet", HALUBENCH_ROWS[:1])

    assert run_eval(path, "halubench", tmp_path)[0] == 0

    (call,) = judge.calls_for("On Monday.")
    data = read_data(call.request["messages"])
    assert data["task_instructions"] == "When did the council meet?"
    assert data["documents"] == [{"index": 1, "content": DOC}]
    assert data["answer"] == "On Monday."


def test_a_halubench_file_with_context_instead_of_passage(
    env: Judge, tmp_path: Path
) -> None:
    rows = [{("context" if key == "passage" else key): value for key, value in row.items()}
            for row in HALUBENCH_ROWS]
    code, report = run_eval(write(tmp_path / "h.csv", rows), "halubench", tmp_path)
    assert code == 0
    assert report["benchmark"]["value"] == pytest.approx(0.875)


def test_without_the_group_column_the_figure_is_over_all_rows(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [{key: value for key, value in row.items() if key != "dataset"}
            for row in AGGREFACT_ROWS]
    code, report = run_eval(write(tmp_path / "a.csv", rows), "aggrefact", tmp_path)
    assert code == 0
    bench = report["benchmark"]
    assert (bench["group_column"], bench["groups"], bench["groups_averaged"]) == (None, {}, None)
    assert bench["value"] == bench["pooled"] == pytest.approx(17 / 24)
    assert "the file has no group column to average over" in capsys.readouterr().out


def test_the_judge_models_published_figure_is_marked(
    env: Judge, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("JUDGE_MODEL", "gpt-4o-mini")
    path = write(tmp_path / "a.parquet", AGGREFACT_ROWS)

    code, report = run_eval(path, "aggrefact", tmp_path)

    assert code == 0
    assert [p["matches_judge"] for p in report["benchmark"]["published"]] == [False, True]
    out = capsys.readouterr().out
    assert out.count("same model") == 1
    assert "74.0" in out
    assert "75.9" in out
    assert "68.1" in out  # gpt-4o's and gpt-4o-mini's published AggreFact-CNN figures
    assert "61.8" in out
    assert "79.8" not in out  # gpt-4o's TofuEval-MeetB: only the file's datasets are listed


@pytest.mark.parametrize(
    ("model", "published", "expected"),
    [
        pytest.param("gpt-4o", AGGREFACT.published[0], True, id="family"),
        pytest.param("gpt-4o-2024-08-06", AGGREFACT.published[0], True, id="other-snapshot"),
        pytest.param("GPT-4o-2024-05-13", AGGREFACT.published[0], True, id="same-snapshot"),
        pytest.param("gpt-4o-mini", AGGREFACT.published[0], False, id="mini-is-not-4o"),
        pytest.param("gpt-4o-mini", AGGREFACT.published[1], True, id="mini"),
        pytest.param("gpt-4o-2024-05-13", HALUBENCH.published[0], True, id="snapshot-of-4o"),
        pytest.param("local-heuristic", HALUBENCH.published[0], False, id="other"),
    ],
)
def test_which_published_figure_is_the_judge_models(
    model: str, published: Published, expected: bool
) -> None:
    assert matches_judge(published, model) is expected


def test_the_published_per_dataset_figures_average_to_the_published_one() -> None:
    # The leaderboard's figure is the mean over its 11 datasets: a typo in one would show.
    for published in AGGREFACT.published:
        assert len(published.per_group) == 11
        mean = sum(published.per_group.values()) / 11
        assert round(mean, 3) == pytest.approx(published.value), published.model


@pytest.mark.parametrize("dataset_format", ["labelled", *BENCHMARKS])
def test_the_command_offers_every_benchmark(dataset_format: str) -> None:
    args = _parser().parse_args(["eval", "--dataset", "d", "--json", "j",
                                 "--format", dataset_format])
    assert args.dataset_format == dataset_format


def test_the_default_format_reports_what_it_always_did(
    env: Judge, tmp_path: Path
) -> None:
    path = tmp_path / "labelled.jsonl"
    path.write_text(json.dumps({"input": "Q?", "documents": ["D."], "output": "A.",
                                "label": "grounded"}) + "\n")
    code = main(["eval", "--dataset", str(path), "--json", str(tmp_path / "r.json")])
    assert code == 0
    assert sorted(json.loads((tmp_path / "r.json").read_text())) == sorted([
        "judge_model", "judge_model_asked", "threshold", "rows", "skipped", "errors", "count",
        "positive_class",
        "balanced_accuracy", "precision", "recall", "f1", "specificity", "confusion",
        "roc_auc", "best_threshold", "best_threshold_balanced_accuracy", "scores", "dataset"])


def test_a_document_longer_than_the_csv_modules_default_field_limit(tmp_path: Path) -> None:
    # FinanceBench passages run past csv's 128 KiB per field, which would refuse the file.
    long_doc = "The bridge opens in May. " * 8000  # 200,000 characters
    path = write(tmp_path / "long.csv", [{"dataset": "x", "doc": long_doc, "claim": "c",
                                          "label": "1"}])
    (row,) = read_dataset(path, "aggrefact")
    assert row.trace.retrieved_documents is not None
    assert row.trace.retrieved_documents[0].content == long_doc


# -- bad input: one line on stderr, exit 2, nothing judged ------------------------------------


def refused(env: Judge, path: Path, dataset_format: str, tmp_path: Path,
            capsys: pytest.CaptureFixture[str]) -> str:
    judge, _ = env
    code, _ = run_eval(path, dataset_format, tmp_path)
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1, err
    assert judge.count() == 0
    return err.rstrip("\n")


def test_a_missing_column_names_the_columns_found_and_expected(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "a.csv"
    path.write_text("dataset,document,claim,label\nx,D.,C.,1\n")
    assert refused(env, path, "aggrefact", tmp_path, capsys) == (
        f"--dataset: {path}: has no column doc: aggrefact files have doc, claim, label "
        "(found: dataset, document, claim, label)")


def test_a_halubench_file_without_passage_or_context(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "h.parquet", [{"id": "1", "question": "Q?", "answer": "A.",
                                           "source_ds": "DROP"}])
    assert refused(env, path, "halubench", tmp_path, capsys) == (
        f"--dataset: {path}: has no column passage or context, label: halubench files have "
        "passage (or context), answer, label (found: id, question, answer, source_ds)")


@pytest.mark.parametrize(
    ("suffix", "rows", "dataset_format", "expected"),
    [
        pytest.param(".csv", [*AGGREFACT_ROWS[:2], {**AGGREFACT_ROWS[2], "label": "yes"}],
                     "aggrefact",
                     "row 3: label must be 1 (supported) or 0 (unsupported), got 'yes'",
                     id="aggrefact-csv"),
        pytest.param(".parquet", [AGGREFACT_ROWS[0], {**AGGREFACT_ROWS[1], "label": 2}],
                     "aggrefact", "row 2: label must be 1 (supported) or 0 (unsupported), got 2",
                     id="aggrefact-parquet"),
        pytest.param(".jsonl", [HALUBENCH_ROWS[0], {**HALUBENCH_ROWS[1], "label": "maybe"}],
                     "halubench", "line 2: label must be PASS or FAIL, got 'maybe'",
                     id="halubench-jsonl"),
        # The other benchmark's labels are refused, not read as the wrong polarity.
        pytest.param(".jsonl", [{**HALUBENCH_ROWS[0], "label": 1}], "halubench",
                     "line 1: label must be PASS or FAIL, got 1", id="halubench-numeric"),
    ],
)
def test_a_bad_label_names_its_row(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    suffix: str, rows: list[dict[str, Any]], dataset_format: str, expected: str,
) -> None:
    path = write(tmp_path / f"bad{suffix}", rows)
    assert refused(env, path, dataset_format, tmp_path, capsys) == (
        f"--dataset: {path}: {expected}")


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        pytest.param("empty.csv", "", "is empty: no header and no rows", id="empty-file"),
        pytest.param("blank.jsonl", "\n  \n", "is empty: no header and no rows", id="blank"),
        pytest.param("header.csv", "dataset,doc,claim,label\r\n", "has columns but no rows",
                     id="header-only"),
        pytest.param("broken.jsonl", '{"doc": "D.", "claim": "C.", "label": 1}\n{"doc": \n',
                     "line 2: not JSON: Expecting value: line 1 column 9 (char 8)",
                     id="broken-line"),
        pytest.param("short.jsonl", '{"doc": "D.", "claim": "C.", "label": 1}\n'
                     '{"doc": "D.", "label": 0}\n', "line 2: no claim", id="row-without-claim"),
        pytest.param("number.jsonl", '{"doc": 5, "claim": "C.", "label": 1}\n',
                     "line 1: doc must be text, got 5", id="doc-not-text"),
    ],
)
def test_an_unusable_file_is_refused_with_why(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    name: str, content: str, expected: str,
) -> None:
    path = tmp_path / name
    path.write_text(content)
    assert refused(env, path, "aggrefact", tmp_path, capsys) == (
        f"--dataset: {path}: {expected}")


def test_an_empty_parquet_file(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pyarrow: Any = importlib.import_module("pyarrow")
    parquet: Any = importlib.import_module("pyarrow.parquet")
    path = tmp_path / "empty.parquet"
    schema = pyarrow.schema([("dataset", pyarrow.string()), ("doc", pyarrow.string()),
                             ("claim", pyarrow.string()), ("label", pyarrow.int64())])
    parquet.write_table(schema.empty_table(), path)
    assert refused(env, path, "aggrefact", tmp_path, capsys) == (
        f"--dataset: {path}: has columns but no rows")


def test_parquet_without_pyarrow_names_the_extra(
    env: Judge, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = write(tmp_path / "test.parquet", AGGREFACT_ROWS)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import fails as if missing
    assert refused(env, path, "aggrefact", tmp_path, capsys) == (
        f"--dataset: {path}: is Parquet, which needs pyarrow: "
        "pip install 'groundedness-worker[parquet]'")
