"""A table in a file as a user downloads or exports one: CSV, JSON lines (or one JSON array of
objects) or Parquet, told apart by its content rather than its name (the hub names its files
``test-00000-of-00001.parquet``; an export may be named anything).

Parquet needs pyarrow, an optional extra: without it a Parquet file is refused with one line
naming the extra. Every other problem is a ``ValueError`` of one line that says where (``row
N``: the N-th data row of a CSV, Parquet or JSON array; ``line N``: a JSON line).
"""

from __future__ import annotations

import csv
import importlib
import io
import json
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from consumer.jsonl import decode_text, numbered_lines

PARQUET_MAGIC = b"PAR1"
PARQUET_EXTRA = "pip install 'groundedness-worker[parquet]'"
# A benchmark document is long (an AggreFact doc or a FinanceBench passage): far past the csv
# module's default 128 KiB per field, which would refuse the file.
_CSV_FIELD_LIMIT = 2**31 - 1

TableKind = Literal["csv", "jsonl", "json", "parquet"]


@dataclass(frozen=True, slots=True)
class Table:
    """A file's column names (JSON: the first row's keys) and its rows, each with where it was
    read and the values of the columns asked for."""

    kind: TableKind
    columns: tuple[str, ...]
    rows: list[tuple[str, dict[str, Any]]]


def read_table(path: Path, wanted: Collection[str]) -> Table:
    """The table in ``path``, rows cut to the ``wanted`` columns. OSError when the file cannot
    be read; ValueError (one line) when it is no table of these kinds."""
    with path.open("rb") as file:
        if file.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC:
            return _read_parquet(path, wanted)
    try:
        text = decode_text(path.read_bytes())
    except UnicodeDecodeError as exc:
        raise ValueError(f"is not UTF-8 text nor Parquet: {exc}") from exc
    start = text.lstrip()[:1]
    if start == "{":
        return _read_json_lines(text, wanted)
    if start == "[":
        return _read_json_array(text, wanted)
    return _read_csv(text, wanted)


def _read_csv(text: str, wanted: Collection[str]) -> Table:
    limit = csv.field_size_limit()
    csv.field_size_limit(_CSV_FIELD_LIMIT)
    try:
        # newline="": quoted fields keep their line breaks (a document has many).
        reader = csv.DictReader(io.StringIO(text, newline=""))
        rows = [(f"row {number}", _cut(row, wanted)) for number, row in enumerate(reader, 1)]
        columns = tuple(reader.fieldnames or ())
    except csv.Error as exc:
        raise ValueError(f"line {reader.line_num}: not CSV: {exc}") from exc
    finally:
        csv.field_size_limit(limit)
    return Table("csv", columns, rows)


def _read_json_lines(text: str, wanted: Collection[str]) -> Table:
    rows: list[tuple[str, dict[str, Any]]] = []
    columns: tuple[str, ...] = ()
    for number, line in numbered_lines(text):
        values = _json_object(line, f"line {number}")
        columns = columns or tuple(values)
        rows.append((f"line {number}", _cut(values, wanted)))
    return Table("jsonl", columns, rows)


def _read_json_array(text: str, wanted: Collection[str]) -> Table:
    try:
        items = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not a JSON array: {str(exc).splitlines()[0]}") from exc
    if not isinstance(items, list):
        raise ValueError("not a JSON array of objects")
    rows = [(f"row {number}", _object(item, f"row {number}"))
            for number, item in enumerate(items, 1)]
    columns = tuple(rows[0][1]) if rows else ()
    return Table("json", columns, [(where, _cut(values, wanted)) for where, values in rows])


def _read_parquet(path: Path, wanted: Collection[str]) -> Table:
    try:
        # Imported by name: pyarrow is optional and ships no type information.
        parquet: Any = importlib.import_module("pyarrow.parquet")
    except ImportError as exc:
        raise ValueError(f"is Parquet, which needs pyarrow: {PARQUET_EXTRA}") from exc
    try:
        columns = tuple(parquet.read_schema(path).names)
        table = parquet.read_table(path, columns=[name for name in columns if name in wanted])
    except (ValueError, OSError) as exc:  # pyarrow's ArrowInvalid / ArrowIOError derive so
        raise ValueError(f"cannot read Parquet: {str(exc).splitlines()[0]}") from exc
    values: list[dict[str, Any]] = table.to_pylist()
    return Table("parquet", columns,
                 [(f"row {number}", row) for number, row in enumerate(values, 1)])


def _json_object(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{where}: not JSON: {str(exc).splitlines()[0]}") from exc
    return _object(value, where)


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: not a JSON object")
    return value


def _cut(values: dict[Any, Any], wanted: Collection[str]) -> dict[str, Any]:
    return {name: value for name, value in values.items() if name in wanted}
