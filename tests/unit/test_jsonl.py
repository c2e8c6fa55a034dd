"""JSON lines are split on ``\\n`` only: every reader of JSONL in ``consumer/`` goes through
``consumer.jsonl``, so a line break that ``str.splitlines`` sees inside a valid JSON line
(U+2028, U+0085, a lone CR...) never cuts it in two."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from consumer.evaluation.check import read_traces
from consumer.evaluation.judge_eval import read_dataset
from consumer.jsonl import numbered_lines, parse_labelled, read_labelled, read_text

# Characters str.splitlines breaks on that may stand raw in a JSON line: inside strings
# (U+2028, U+2029, U+0085 are not JSON control characters), or, for CR, as whitespace between
# tokens. (The others, U+000B, U+000C and U+001C-U+001E, are control characters JSON forbids
# raw, so a line holding one is invalid whatever the split.)
IN_STRINGS = "a\u2028b\u2029c\x85d"
BREAKS_IN_STRINGS = [pytest.param(char, id=f"U+{ord(char):04X}") for char in IN_STRINGS[1::2]]


def row(i: int, text: str = IN_STRINGS) -> str:
    """One labelled row, written with the break characters raw (not escaped) and a lone CR
    between two of its tokens."""
    fields = {"id": f"r{i}", "input": f"Q{i} {text}", "documents": [f"D{i} {text}"],
              "output": f"Answer {i}. {text}", "label": "grounded"}
    return json.dumps(fields, ensure_ascii=False).replace(', "label"', ',\r"label"')


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("a\nb\n", [(1, "a"), (2, "b")], id="lf"),
        pytest.param("a\r\nb\r\n", [(1, "a"), (2, "b")], id="crlf"),
        pytest.param("a\nb", [(1, "a"), (2, "b")], id="no-final-newline"),
        pytest.param("a\n\n  \nb\n", [(1, "a"), (4, "b")], id="blank-lines-keep-numbers"),
        pytest.param("a\rb\n", [(1, "a\rb")], id="lone-cr-is-not-a-break"),
        pytest.param(f"{IN_STRINGS}\n", [(1, IN_STRINGS)], id="unicode-breaks-are-data"),
        pytest.param("a\x0bb\x0cc\n", [(1, "a\x0bb\x0cc")], id="vt-ff-are-data"),
        pytest.param("", [], id="empty"),
    ],
)
def test_numbered_lines_split_on_lf_only(text: str, expected: list[tuple[int, str]]) -> None:
    assert list(numbered_lines(text)) == expected


def test_read_text_keeps_carriage_returns(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"a\rb\r\nc\n")
    assert read_text(path) == "a\rb\r\nc\n"


def test_read_text_drops_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbf{}\r\n\xef\xbb\xbf\n")
    assert read_text(path) == "{}\r\n\ufeff\n"  # only the leading one marks the encoding


def _dataset_rows(path: Path) -> list[Any]:
    return [labelled.trace.output for labelled in read_dataset(path)]


def _check_rows(path: Path) -> list[Any]:
    traces, problems = read_traces(read_text(path))
    assert problems == []
    return [numbered.trace.output for numbered in traces]


def _labelled_rows(path: Path) -> list[Any]:
    """What load-sample and the heuristic's measurement read."""
    return [labelled.as_trace()["output"] for labelled in read_labelled(path)]


READERS: list[Any] = [
    pytest.param(_dataset_rows, id="eval-dataset"),
    pytest.param(_check_rows, id="check-traces"),
    pytest.param(_labelled_rows, id="labelled"),
]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("newline", [pytest.param("\n", id="lf"), pytest.param("\r\n",
                                                                                 id="crlf")])
def test_every_jsonl_reader_keeps_a_line_whole(
    tmp_path: Path, reader: Callable[[Path], list[Any]], newline: str
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(newline.join(row(i) for i in range(3)).encode("utf-8") + b"\n")
    # What check reads for a trace is the same row with a trace_id.
    if reader is _check_rows:
        path.write_bytes(path.read_bytes().replace(b'{"id"', b'{"trace_id"'))
    assert reader(path) == [f"Answer {i}. {IN_STRINGS}" for i in range(3)]


@pytest.mark.parametrize("char", BREAKS_IN_STRINGS)
def test_one_break_character_alone_keeps_its_line(tmp_path: Path, char: str) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(row(1, char) + "\n", encoding="utf-8", newline="")
    assert _dataset_rows(path) == [f"Answer 1. {char}"]


@pytest.mark.parametrize("reader", READERS)
def test_every_jsonl_reader_reads_a_file_with_a_byte_order_mark(
    tmp_path: Path, reader: Callable[[Path], list[Any]]
) -> None:
    """Windows editors save UTF-8 with a BOM: it is not part of the first line."""
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(row(i) for i in range(2)).encode() + b"\r\n")
    if reader is _check_rows:
        path.write_bytes(path.read_bytes().replace(b'{"id"', b'{"trace_id"'))
    assert reader(path) == [f"Answer {i}. {IN_STRINGS}" for i in range(2)]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        pytest.param('{"output": "x", "label": "maybe"}', "label must be grounded or ungrounded, "
                     "got 'maybe'", id="unknown-label"),
        pytest.param('{"output": "x"}', "label must be grounded or ungrounded, got None",
                     id="no-label"),
        pytest.param('["grounded"]', "not a JSON object", id="not-an-object"),
        pytest.param('{"label": "grounded", ', "Expecting property name", id="broken-json"),
    ],
)
def test_a_bad_labelled_row_is_refused_with_its_line(line: str, why: str) -> None:
    text = '{"output": "fine", "label": "grounded"}\n\n' + line + "\n"
    with pytest.raises(ValueError, match=r"^rows\.jsonl:3: ") as caught:
        parse_labelled(text, "rows.jsonl")
    assert why in str(caught.value)


def test_labelled_rows_keep_their_fields_and_line() -> None:
    text = (
        '{"id": "a", "input": "Q?", "documents": ["D"], "output": "A.", "label": "grounded", '
        '"source": "s"}\n'
        '{"output": "B.", "label": "ungrounded"}\n'
    )
    first, second = parse_labelled(text)
    assert (first.line, first.id, first.input, first.documents, first.output, first.source) == (
        1, "a", "Q?", ["D"], "A.", "s")
    assert first.grounded
    assert (second.line, second.id, second.documents, second.grounded) == (
        2, "line-2", [], False)
