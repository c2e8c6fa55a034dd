"""Which verdicts ``groundedness verdicts`` shows: a record read as a verdict, and the filters.

Pure: no Kafka. A record is a verdict if its value is a JSON object with the fields every
verdict has (``verdict_id``, ``trace_id``, ``rule`` as strings, ``verdict`` one of pass,
fail, error); the rest is shown as it is, so a verdict of a newer worker (a rule this one does
not know, a field added) is still shown rather than taken for garbage. Anything else is
``NotAVerdict``, with a reason for the one line the command says about it.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, get_args

from schemas.verdict import Outcome, RuleName

OUTCOMES: tuple[str, ...] = get_args(Outcome)  # pass, fail, error
RULE_NAMES: tuple[str, ...] = get_args(RuleName)
_REQUIRED = ("verdict_id", "trace_id", "rule")


class NotAVerdict(ValueError):
    """A record whose value is not a verdict: the reason, in a few words."""


def read_verdict(value: bytes | None) -> dict[str, Any]:
    """The verdict a record's value holds; ``NotAVerdict`` saying why it holds none."""
    if value is None:
        raise NotAVerdict("no value (a tombstone)")
    try:
        text = value.decode("utf-8")  # as the sink encodes (json.loads would guess UTF-16)
    except UnicodeDecodeError:
        raise NotAVerdict("not UTF-8 text") from None
    try:
        verdict = json.loads(text)
    except ValueError as exc:
        raise NotAVerdict(f"not JSON ({exc})") from None
    if not isinstance(verdict, dict):
        raise NotAVerdict(f"a JSON {type(verdict).__name__}, not an object")
    for field in _REQUIRED:
        if not isinstance(verdict.get(field), str):
            raise NotAVerdict(f"no {field}")
    if verdict.get("verdict") not in OUTCOMES:
        raise NotAVerdict(f"verdict is {verdict.get('verdict')!r}, not pass, fail or error")
    return verdict


@dataclass(frozen=True, slots=True)
class Selection:
    """The filters: a verdict is shown when it passes each one given (an empty one passes all);
    several values of one filter are alternatives."""

    rules: frozenset[str] = frozenset()
    verdicts: frozenset[str] = frozenset()
    trace_ids: frozenset[str] = frozenset()

    @classmethod
    def of(cls, rules: Collection[str] | None = None, verdicts: Collection[str] | None = None,
           trace_ids: Collection[str] | None = None) -> Selection:
        """From the command line's lists (None: not given)."""
        return cls(frozenset(rules or ()), frozenset(verdicts or ()), frozenset(trace_ids or ()))

    def matches(self, verdict: dict[str, Any]) -> bool:
        """Whether ``verdict`` (from ``read_verdict``) is shown."""
        return all(not wanted or verdict[field] in wanted for field, wanted in (
            ("rule", self.rules), ("verdict", self.verdicts), ("trace_id", self.trace_ids)))
