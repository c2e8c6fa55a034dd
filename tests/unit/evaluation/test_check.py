"""`groundedness check` through the real command against the fake judge (a loopback server)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from consumer.cli import main
from consumer.rules.verdicts import verdict_id
from tests.unit.evaluation.conftest import Judge, notes, verdict_lines


def jsonl(path: Path, *rows: dict[str, Any] | str) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n"
                            for row in rows))
    return path


def test_verdicts_come_out_in_input_order_and_an_error_exits_1(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The first answer is the slowest, so input order is not completion order.
    path = jsonl(
        tmp_path / "traces.jsonl",
        {"trace_id": "slow", "output": "Late but fine. [[delay=0.5]]"},
        {"trace_id": "fail", "output": "Made up. [[score=1]]"},
        {"trace_id": "empty", "output": "   "},
        {"trace_id": "error", "output": "Rambles. [[garbage]]"},
        {"trace_id": "pass", "output": "Supported. [[score=4]]"},
    )

    code = main(["check", str(path)])

    captured = capsys.readouterr()
    lines = verdict_lines(captured.out)
    assert [v["trace_id"] for v in lines] == ["slow", "fail", "error", "pass"]
    assert [v["verdict"] for v in lines] == ["pass", "fail", "error", "pass"]
    assert all(v["source"] is None for v in lines)
    assert lines[0]["verdict_id"] == verdict_id("slow")
    *notes_and_rules, judge = captured.err.splitlines()
    assert notes_and_rules == [
        "check: line 3: trace 'empty' has an empty output: not evaluated, no verdict",
        "check: groundedness: 2 pass, 1 fail, 1 error",
        "check: left out: 1 empty output"]
    assert judge.startswith("check: judge: 4 verdicts, 0 from the cache, ")
    assert judge.endswith(" completion), no prices set (JUDGE_PRICE_*)")
    assert code == 1


def test_every_trace_judged_exits_0(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = jsonl(tmp_path / "t.jsonl", {"trace_id": "a", "output": "Fine. [[score=5]]"},
                 {"trace_id": "b", "output": "Not fine. [[score=2]]"})
    assert main(["check", str(path)]) == 0
    assert [v["verdict"] for v in verdict_lines(capsys.readouterr().out)] == ["pass", "fail"]


def test_one_pretty_printed_trace(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"trace_id": "one", "output": "Yes. [[score=3]]",
                                "retrieved_documents": ["A document."]}, indent=2))
    assert main(["check", str(path)]) == 0
    (verdict,) = verdict_lines(capsys.readouterr().out)
    assert (verdict["trace_id"], verdict["score"], verdict["verdict"]) == ("one", 0.5, "pass")


def stdin(data: bytes) -> io.TextIOWrapper:
    """A text stdin over ``data``, as the interpreter sets it up (universal newlines)."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")


def test_stdin(
    env: Judge, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", stdin(
        b'{"trace_id": "s1", "output": "x [[score=5]]"}\n{"trace_id": "s2", "output": "y"}\n'))
    assert main(["check", "-"]) == 0
    assert [v["trace_id"] for v in verdict_lines(capsys.readouterr().out)] == ["s1", "s2"]


# Raw in a JSON line, these are data (in strings) or whitespace (a CR between tokens); Python's
# str.splitlines and universal newlines would break the line at each of them.
BREAKING_LINE = ('{"trace_id": "%s", "output": "One\u2028line\u0085really\u2029. [[score=4]]",'
                 '\r"retrieved_documents": ["a\u2028b"]}')


@pytest.mark.parametrize("source", [pytest.param("file", id="file"),
                                    pytest.param("stdin", id="stdin")])
def test_a_line_is_split_on_newline_only(
    env: Judge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], source: str,
) -> None:
    data = "\r\n".join(BREAKING_LINE % trace_id for trace_id in ("u1", "u2")).encode()
    path = tmp_path / "breaks.jsonl"
    path.write_bytes(data)
    if source == "stdin":
        monkeypatch.setattr("sys.stdin", stdin(data))

    code = main(["check", str(path) if source == "file" else "-"])

    captured = capsys.readouterr()
    assert notes(captured.err) == []
    verdicts = verdict_lines(captured.out)
    assert [(v["trace_id"], v["verdict"]) for v in verdicts] == [("u1", "pass"), ("u2", "pass")]
    assert code == 0


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("source", [pytest.param("file", id="file"),
                                    pytest.param("stdin", id="stdin")])
@pytest.mark.parametrize("layout", [pytest.param("lines", id="json-lines"),
                                    pytest.param("one", id="one-pretty-printed")])
def test_a_byte_order_mark_is_not_part_of_line_1(
    env: Judge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], source: str, layout: str,
) -> None:
    """Windows editors save UTF-8 with a BOM; it marks the encoding, it is not data."""
    rows = [{"trace_id": "b1", "output": "x [[score=5]]"}, {"trace_id": "b2", "output": "y"}]
    text = (json.dumps(rows[0], indent=2) if layout == "one"
            else "\r\n".join(json.dumps(row) for row in rows) + "\r\n")
    data = BOM + text.encode()
    path = tmp_path / "bom.jsonl"
    path.write_bytes(data)
    if source == "stdin":
        monkeypatch.setattr("sys.stdin", stdin(data))

    code = main(["check", str(path) if source == "file" else "-"])

    captured = capsys.readouterr()
    assert notes(captured.err) == []
    expected = ["b1"] if layout == "one" else ["b1", "b2"]
    assert [v["trace_id"] for v in verdict_lines(captured.out)] == expected
    assert code == 0


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        pytest.param("not json", "not valid JSON", id="not-json"),
        pytest.param("[1, 2]", "not an object", id="array"),
        pytest.param('{"output": "no id"}', "trace_id", id="no-trace-id"),
    ],
)
def test_an_undecodable_line_is_named_and_exits_nonzero(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str], bad_line: str, reason: str
) -> None:
    path = jsonl(tmp_path / "t.jsonl", {"trace_id": "ok", "output": "Fine."}, bad_line,
                 {"trace_id": "ok2", "output": "Fine too."})

    code = main(["check", str(path)])

    captured = capsys.readouterr()
    assert [v["trace_id"] for v in verdict_lines(captured.out)] == ["ok", "ok2"]
    (problem,) = notes(captured.err)
    assert problem.startswith("check: line 2: ")
    assert reason in problem
    assert code != 0


def test_judge_calls_run_concurrently_up_to_the_limit(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    judge, _ = env
    judge.latency_s = 0.4
    path = jsonl(tmp_path / "t.jsonl",
                 *({"trace_id": f"t{i}", "output": f"Answer {i}."} for i in range(8)))

    assert main(["check", str(path)]) == 0

    assert len(verdict_lines(capsys.readouterr().out)) == 8
    arrivals = sorted(call.at for call in judge.calls if call.answer != "probe")
    first_wave = [at for at in arrivals if at - arrivals[0] < 0.3]
    assert len(first_wave) == 4, "JUDGE_MAX_CONCURRENCY=4 calls at once, not 1 and not 8"


@pytest.mark.parametrize(
    ("unset", "message"),
    [
        pytest.param("MIN_ACCEPTABLE_SCORE", "Minimum acceptable score is required.",
                     id="no-threshold"),
        pytest.param("OPENAI_API_KEY", "OPENAI_API_KEY is not set", id="no-api-key"),
    ],
)
def test_missing_config_exits_2_before_judging(
    env: Judge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], unset: str, message: str,
) -> None:
    judge, _ = env
    monkeypatch.delenv(unset)
    path = jsonl(tmp_path / "t.jsonl", {"trace_id": "a", "output": "Fine."})
    assert main(["check", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(message)
    assert captured.out == ""
    assert judge.count() == 0


def test_a_missing_file_exits_2(env: Judge, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "/nonexistent/traces.jsonl"]) == 2
    assert capsys.readouterr().err.startswith("check: cannot read /nonexistent/traces.jsonl")
