"""Record bytes -> ``TraceEvent``; anything else raises ``DecodeError`` with a one-line reason.

Only what the judging needs refuses a trace: ``trace_id``, ``output``, ``input``,
``expected_output`` and the documents' ``content``. A field the worker only carries along
(``project_id``, ``timestamp``, ``metadata``, ``schema_version``, a document's ``id`` or
``metadata``) whose value has no reading (``"timestamp": true``, ``"metadata": ["a"]``, an id
of ``1e30``, past the floats that hold an integer exactly) is dropped, with a debug log line
``trace_field_dropped`` naming it, and the trace is judged.

The tools the rules read (``tools_available``, ``tool_calls``, ``agent``) are carried fields
too, for now: producers sent fields of those names in shapes of their own (an Assistants tool
without a name, a LangChain action, a comma list) before the contract named them, and their
traces were judged; one without a reading is dropped and the trace judged as before.
"""

from __future__ import annotations

import json
import re
from typing import Any

import structlog
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from consumer.errors import DecodeError
from consumer.telemetry.mapped_trace import UNNAMED_TOOL
from schemas.trace import TraceEvent

MAX_DECODE_REASON_CHARS = 300
_SURROGATE = re.compile("[\\ud800-\\udfff]")
# Fields carried along, not read to judge: one without a reading is dropped, not refused. The
# tool fields too, until a rule reads them: producers sent fields of those names in shapes of
# their own before the contract named them, and their traces were judged.
_CARRIED = frozenset({"project_id", "timestamp", "metadata", "schema_version", "agent",
                      "tools_available", "tool_calls"})
_CARRIED_BY_DOCUMENTS = frozenset({"id", "metadata"})
# Lists whose bad items are dropped one by one: one odd tool must not hide the others.
_LISTED = frozenset({"tools_available", "tool_calls"})

log = structlog.get_logger(__name__)


def decode_trace(value: bytes | None) -> TraceEvent:
    """Parse one Kafka record value into a trace event, strictly."""
    if value is None:
        raise DecodeError("record has no value (tombstone)")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"value is not UTF-8: byte {exc.start} is invalid") from exc
    try:
        document = json.loads(
            text, object_pairs_hook=_refuse_duplicate_keys, parse_constant=_refuse_constant
        )
    except RecursionError as exc:
        raise DecodeError("value is nested too deeply") from exc
    except DecodeError:
        raise
    except ValueError as exc:  # JSONDecodeError, or an integer too long to convert
        raise DecodeError(_cut(f"value is not valid JSON: {exc}")) from exc
    if not isinstance(document, dict):
        raise DecodeError(f"value is JSON {type(document).__name__}, not an object")
    if "\\ud" in text.lower():
        _refuse_lone_surrogates(document)
    try:
        return _validate(document)
    except RecursionError as exc:
        raise DecodeError("value is nested too deeply") from exc


def _validate(document: dict[str, Any]) -> TraceEvent:
    """The trace event, dropping carried-along fields that have no reading (once)."""
    try:
        return TraceEvent.model_validate(document)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        refusing = [error for error in errors if _carried(error["loc"]) is None]
        if refusing:
            raise DecodeError(_cut(f"not a trace event: {_problem(refusing)}")) from exc
    bad_items: dict[str, dict[int, set[str]]] = {}  # tool list -> item -> its bad fields
    for error in errors:
        where = _carried(error["loc"]) or ()
        problem = _cut(error["msg"].removeprefix("Value error, "))
        if where[0] in _LISTED and len(where) == 2:
            field = str(error["loc"][2]) if len(error["loc"]) > 2 else ""
            bad_items.setdefault(str(where[0]), {}).setdefault(int(where[1]), set()).add(field)
            log.debug("trace_field_dropped", field=".".join(map(str, where)), problem=problem)
            continue
        holder: Any = document if len(where) == 1 else document[str(where[0])][where[1]]
        if holder.pop(where[-1], None) is not None:
            log.debug("trace_field_dropped", field=".".join(map(str, where)), problem=problem)
    for name, items in bad_items.items():
        kept = (_mended(name, item, items.get(index)) for index, item in enumerate(document[name]))
        document[name] = [item for item in kept if item is not None] or None
    try:
        return TraceEvent.model_validate(document)
    except ValidationError as exc:  # not expected: what is left had no problem
        problems = exc.errors(include_url=False, include_input=False)
        raise DecodeError(_cut(f"not a trace event: {_problem(problems)}")) from exc


def _mended(name: str, item: Any, bad: set[str] | None) -> Any:
    """One item of a tool list as kept: as it is when it had no problem; a tool call whose
    only problem is its name still ran, under a placeholder name (as from spans); any other
    bad item is dropped (None), its list's good items kept."""
    if bad is None:
        return item
    if name == "tool_calls" and bad == {"name"} and isinstance(item, dict):
        return {**item, "name": UNNAMED_TOOL}
    return None


def _carried(loc: tuple[int | str, ...]) -> tuple[int | str, ...] | None:
    """Where a carried-along field is, if the problem at ``loc`` lies in one: one item of a
    tool list, else the whole field."""
    if loc[:1] and loc[0] in _LISTED and len(loc) >= 2 and isinstance(loc[1], int):
        return loc[:2]
    if loc[:1] and loc[0] in _CARRIED:
        return loc[:1]
    if (len(loc) >= 3 and loc[0] == "retrieved_documents" and isinstance(loc[1], int)
            and loc[2] in _CARRIED_BY_DOCUMENTS):
        return loc[:3]
    return None


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DecodeError(_cut(f"value has duplicate key {key!r}"))
            seen.add(key)
    return result


def _refuse_constant(name: str) -> Any:
    raise DecodeError(f"value holds {name}, which is not JSON")


def _refuse_lone_surrogates(document: dict[str, Any]) -> None:
    # Escaped lone surrogates (\ud800) parse into str objects that cannot be encoded again,
    # so they would fail later when the prompt or the verdict is written. (json.loads joins
    # valid pairs, so any surrogate left is lone.) Walked with a stack, not json.dumps: a
    # document nested just under the parser's depth limit would overflow a recursive walk.
    pending: list[Any] = [document]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str) and _SURROGATE.search(item):
            raise DecodeError("value holds a lone UTF-16 surrogate escape")


def _problem(errors: list[ErrorDetails]) -> str:
    """The first problem, and how many there are."""
    error = errors[0]
    where = ".".join(str(part) for part in error["loc"]) or "value"
    message = error["msg"].removeprefix("Value error, ")  # our validators' own words
    return f"{where}: {message} ({len(errors)} problem(s))"


def _cut(text: str) -> str:
    limit = MAX_DECODE_REASON_CHARS
    return text if len(text) <= limit else text[: limit - 1] + "…"
