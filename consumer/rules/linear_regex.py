"""Regular expressions matched in time linear in the text (RE2), for what reads an answer.

An answer is written by a model, or by whoever injects its prompt, and Python's ``re``
backtracks: ``\\{\\{cite:(\\w+-?)+\\}\\}`` takes seconds on 35 characters and doubles with each
one more, on the event loop. RE2 (``google-re2``) runs every pattern as an automaton, so a
match costs time linear in the answer whatever the pattern, and it refuses what an automaton
cannot do: backreferences, look-arounds, atomic groups and possessive repeats. Those refusals
become one sentence naming the construct (``compile_linear``), said at start.

RE2's syntax is Python's for what a citation pattern needs (classes, groups, ``(?P<name>)``,
``(?i)``, ``{m,n}`` up to 1000), with these differences: ``\\d``, ``\\w``, ``\\s`` and ``\\b`` are
ASCII (``\\p{Nd}``, ``\\pL`` and ``\\p{Greek}`` name Unicode classes); ``\\z`` for Python's
``\\Z``; ``\\x{3010}`` for ``\\u3010``; no ``(?x)`` and no ``(?#...)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, cast, overload

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

# What RE2's message starts with, and the sentence said instead (its own message follows).
_REFUSALS = (
    *((f"invalid escape sequence: \\{digit}", "uses a backreference") for digit in "123456789"),
    ("invalid perl operator: (?P", "uses a backreference"),  # (?P=name); (?P<name>) is fine
    ("invalid perl operator: (?=", "uses a look-ahead"),
    ("invalid perl operator: (?!", "uses a look-ahead"),
    ("invalid perl operator: (?<=", "uses a look-behind"),
    ("invalid perl operator: (?<!", "uses a look-behind"),
    ("invalid perl operator: (?>", "uses an atomic group"),
    ("bad repetition operator: ++", "uses a possessive repeat"),
    ("bad repetition operator: *+", "uses a possessive repeat"),
    ("bad repetition operator: ?+", "uses a possessive repeat"),
)
_HINTS = (
    ("invalid escape sequence: \\Z", "write \\z for the end of the text"),
    ("invalid escape sequence: \\u", "write \\x{3010} for a code point"),
    ("invalid escape sequence: \\U", "write \\x{1F600} for a code point"),
    ("invalid perl operator: (?x", "verbose mode is Python's only"),
    ("invalid perl operator: (?#", "comments are Python's only"),
)


class LinearMatch(Protocol):
    """What is read of a match: its text, a group's, and where it stands."""

    @overload
    def group(self) -> str: ...
    @overload
    def group(self, group: int | str) -> str | None: ...
    def group(self, group: int | str = 0) -> str | None:
        """The text of the whole match (0) or of a group; None for a group that took no part."""
        ...

    def start(self) -> int:
        """Where the match starts, in characters."""
        ...

    def end(self) -> int:
        """Where the match ends, in characters."""
        ...


class LinearPattern:
    """A compiled RE2 pattern: ``finditer`` and ``search`` as ``re``'s, in linear time."""

    __slots__ = ("_regexp", "pattern")

    def __init__(self, pattern: str, regexp: Any) -> None:
        self.pattern = pattern  # as written
        self._regexp = regexp

    @property
    def groups(self) -> frozenset[str]:
        """The names of the pattern's named groups."""
        return frozenset(cast("dict[str, int]", self._regexp.groupindex))

    def finditer(self, text: str) -> Iterator[LinearMatch]:
        """Every match, left to right, none overlapping (empty ones included)."""
        return cast("Iterator[LinearMatch]", self._regexp.finditer(text))

    def search(self, text: str) -> LinearMatch | None:
        """The first match, if any."""
        return next(self.finditer(text), None)

    def __repr__(self) -> str:
        return f"LinearPattern({self.pattern!r})"


def compile_linear(pattern: str, *, ignore_case: bool = False) -> LinearPattern:
    """``pattern`` for RE2; ValueError naming what RE2 cannot run, in one sentence."""
    options = re2.Options()
    options.log_errors = False  # RE2 would print its own line to stderr besides ours
    options.case_sensitive = not ignore_case
    try:
        regexp = re2.compile(pattern, options)
    except re2.error as exc:
        raise ValueError(_explained(_message(exc))) from None
    return LinearPattern(pattern, regexp)


def _message(exc: BaseException) -> str:
    detail = exc.args[0] if exc.args else ""
    return detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)


def _explained(message: str) -> str:
    for start, what in _REFUSALS:
        if message.startswith(start):
            return f"{what}, which the linear-time matcher (RE2) refuses ({message})"
    for start, hint in _HINTS:
        if message.startswith(start):
            return f"not RE2 syntax: {message} ({hint})"
    return f"not a regular expression RE2 accepts: {message}"
