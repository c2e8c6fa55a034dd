"""`groundedness check` on files a user may hand it by mistake: one clear line, exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from consumer.cli import main
from tests.support.otel_spans import Recorder, otlp_json, otlp_proto, rag_trace
from tests.unit.evaluation.conftest import Judge, verdict_lines


def _run(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    code = main(["check", str(path)])
    captured = capsys.readouterr()
    return code, [v["trace_id"] for v in verdict_lines(captured.out)], captured.err


def _spans_line() -> str:
    recorder = Recorder()
    rag_trace(recorder.tracer)
    return otlp_json(otlp_proto(recorder.spans())).decode()


def test_an_empty_file_says_so(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    assert _run(path, capsys) == (1, [], "check: the file holds no trace\n")


@pytest.mark.parametrize("rows", [[{"trace_id": "a", "output": "x"}], []])
def test_a_json_array_is_refused_in_one_line(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[object]
) -> None:
    path = tmp_path / "array.json"
    path.write_text(json.dumps(rows, indent=2))
    code, judged, err = _run(path, capsys)
    assert (code, judged) == (1, [])
    assert err.count("\n") == 1
    assert "one JSON array" in err


def test_a_deeply_nested_document_is_a_bad_line_not_a_traceback(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n"
                    + json.dumps({"trace_id": "ok", "output": "Fine. [[score=5]]"}) + "\n")
    code, judged, err = _run(path, capsys)
    assert (code, judged) == (1, ["ok"])
    assert err.startswith("check: line 1: ")
    assert "Traceback" not in err


def test_spans_among_trace_events_are_named_with_the_way_to_read_them(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps({"trace_id": "t1", "output": "Fine. [[score=5]]"}) + "\n"
                    + _spans_line() + "\n")
    code, judged, err = _run(path, capsys)
    assert (code, judged) == (1, ["t1"])
    assert err.startswith("check: line 2: ")
    assert "--format otlp_json" in err
