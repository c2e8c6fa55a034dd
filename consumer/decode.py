"""Record bytes -> ``TraceEvent``; anything else raises ``DecodeError`` with a one-line reason."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from consumer.errors import DecodeError
from schemas.trace import TraceEvent

MAX_REASON_CHARS = 300
_SURROGATE = re.compile("[\\ud800-\\udfff]")


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
        return TraceEvent.model_validate(document)
    except ValidationError as exc:
        raise DecodeError(_cut(f"not a trace event: {_first_problem(exc)}")) from exc
    except RecursionError as exc:
        raise DecodeError("value is nested too deeply") from exc


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


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in error["loc"]) or "value"
    message = error["msg"].removeprefix("Value error, ")  # our validators' own words
    return f"{where}: {message} ({exc.error_count()} problem(s))"


def _cut(text: str) -> str:
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"
