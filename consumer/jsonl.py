"""JSON lines, split the way the format defines them: on ``\\n`` only (a ``\\r\\n`` ending is
tolerated), from UTF-8 with or without a byte-order mark; and the labelled rows that ``eval``,
``load-sample`` and the heuristic's measurement read. Every reader of JSONL in the worker goes
through here.

``str.splitlines`` and Python's universal newlines also break on a lone ``\\r``, U+0085,
U+2028, U+2029 and a few control characters. The first may stand raw between the tokens of a
valid JSON line and the next three raw inside its strings, so they would cut one valid line
into two invalid ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LABELLED_SAMPLE = Path(__file__).parent / "data" / "factcheck-gpt-sample.jsonl"
LABELS = ("grounded", "ungrounded")


@dataclass(frozen=True, slots=True)
class LabelledRow:
    """One labelled trace (``id``, ``input``, ``documents``, ``output``, ``label``,
    ``source``) and the line it was read from."""

    line: int
    id: str  # the row's ``id``, or ``line-N`` when it has none
    input: Any
    documents: Any  # as written (a list unless the row is wrong; the trace schema checks)
    output: Any
    label: str  # one of LABELS
    source: Any = None

    @property
    def grounded(self) -> bool:
        """Did people judge the answer grounded in the documents?"""
        return self.label == "grounded"

    def as_trace(self) -> dict[str, Any]:
        """The row as a trace event's fields; the label rides in metadata, for agreement."""
        return {
            "trace_id": self.id,
            "input": self.input,
            "output": self.output,
            "retrieved_documents": self.documents,
            "metadata": {"label": self.label, "source": self.source},
        }


def numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) for every line that is not blank, ``\\r\\n`` tolerated."""
    for number, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if line.strip():
            yield number, line


def read_text(path: Path) -> str:
    """A UTF-8 file's text as written: no newline translation (``Path.read_text`` turns a
    lone ``\\r`` into ``\\n``)."""
    return decode_text(path.read_bytes())


def decode_text(data: bytes) -> str:
    """UTF-8 bytes as text, a leading byte-order mark dropped (Windows editors write one)."""
    return data.decode("utf-8-sig")


def parse_labelled(text: str, name: str = "<labelled>") -> list[LabelledRow]:
    """The rows of labelled JSON lines; ValueError ``NAME:LINE: why`` for the first bad row."""
    rows: list[LabelledRow] = []
    for number, line in numbered_lines(text):
        try:
            rows.append(labelled_row(number, line))
        except ValueError as exc:
            raise ValueError(f"{name}:{number}: {exc}") from exc
    return rows


def labelled_row(number: int, line: str) -> LabelledRow:
    """Line ``number`` of labelled JSON lines; ValueError (one line: why) when it is none."""
    try:
        row = json.loads(line)
        if not isinstance(row, dict):
            raise ValueError("not a JSON object")
        label = row.get("label")
        if label not in LABELS:
            raise ValueError(f"label must be grounded or ungrounded, got {label!r}")
    except ValueError as exc:
        raise ValueError(str(exc).splitlines()[0]) from exc
    return LabelledRow(
        line=number,
        id=str(row.get("id") or f"line-{number}"),
        input=row.get("input"),
        documents=row.get("documents") or [],
        output=row.get("output"),
        label=label,
        source=row.get("source"),
    )


def read_labelled(path: Path = LABELLED_SAMPLE) -> list[LabelledRow]:
    """A labelled JSONL file's rows (default: the bundled sample, see ``data/README.md``)."""
    return parse_labelled(read_text(path), str(path))
