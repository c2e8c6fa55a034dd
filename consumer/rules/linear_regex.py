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

import re
from collections.abc import Iterator
from typing import Any, cast, overload

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
DEFAULT_MAX_MEM_BYTES = 8 << 20  # RE2's own default
_SURROGATE = re.compile("[\ud800-\udfff]")


class LinearMatch:
    """One match: where it stands in the text (in characters, as ``re`` counts), its text and
    its groups'."""

    __slots__ = ("_encoded", "_found", "_text", "end_at", "start_at")

    def __init__(self, text: str, encoded: bytes, found: Any, start_at: int, end_at: int) -> None:
        self._text, self._encoded, self._found = text, encoded, found
        self.start_at, self.end_at = start_at, end_at

    def start(self) -> int:
        """Where the match starts."""
        return self.start_at

    def end(self) -> int:
        """Where the match ends."""
        return self.end_at

    @overload
    def group(self) -> str: ...
    @overload
    def group(self, group: int | str) -> str | None: ...
    def group(self, group: int | str = 0) -> str | None:
        """The text of the whole match (0) or of a group; None for a group that took no part."""
        if group == 0:
            return self._text[self.start_at:self.end_at]
        index = group if isinstance(group, int) else self._found.re.groupindex.get(group, -1)
        start, end = cast("tuple[int, int]", self._found.span(index))
        if start < 0:
            return None
        return self._text[self._chars(start):self._chars(end)]

    def _chars(self, offset: int) -> int:
        """A byte offset inside the match as a character offset in the text."""
        if len(self._encoded) == len(self._text):
            return offset
        match_start = cast("int", self._found.start())
        return self.start_at + len(self._encoded[match_start:offset].decode())

    def __repr__(self) -> str:
        return f"LinearMatch({self.start_at}, {self.end_at}, {self.group()!r})"


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
        # On bytes: google-re2 given a str counts every match's offsets in characters from the
        # text's start, in Python-level steps (13 ns a byte: 0.4 ms on a 28 KB answer). Here
        # each is counted on from the last, so a whole finditer decodes the text once.
        encoded = _utf8(text)
        ascii_only = len(encoded) == len(text)  # then a byte is a character
        byte_at = char_at = 0
        for found in self._regexp.finditer(encoded):
            start, end = cast("tuple[int, int]", found.span())
            if ascii_only:
                yield LinearMatch(text, encoded, found, start, end)
                continue
            start_at = char_at + len(encoded[byte_at:start].decode())
            char_at, byte_at = start_at + len(encoded[start:end].decode()), end
            yield LinearMatch(text, encoded, found, start_at, char_at)

    def search(self, text: str) -> LinearMatch | None:
        """The first match, if any."""
        return next(self.finditer(text), None)

    def __repr__(self) -> str:
        return f"LinearPattern({self.pattern!r})"


def _utf8(text: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError:
        # A lone surrogate (JSON's "\ud800") has no UTF-8: U+FFFD stands in, one character of
        # three bytes as the surrogate is, so that RE2 reads it as re does, a character.
        return _SURROGATE.sub("\ufffd", text).encode()


def compile_linear(pattern: str, *, ignore_case: bool = False,
                   max_mem_bytes: int = DEFAULT_MAX_MEM_BYTES) -> LinearPattern:
    """``pattern`` for RE2; ValueError naming what RE2 cannot run, in one sentence.
    ``max_mem_bytes`` bounds the program and its automaton's cache: past it RE2 still matches
    in linear time, only slower (its NFA instead of a cached DFA)."""
    options = re2.Options()
    options.log_errors = False  # RE2 would print its own line to stderr besides ours
    options.max_mem = max_mem_bytes
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
