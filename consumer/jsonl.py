"""JSON lines, split the way the format defines them: on ``\\n`` only (a ``\\r\\n`` ending is
tolerated), from UTF-8 with or without a byte-order mark. Every reader of JSONL in the worker
goes through here.

``str.splitlines`` and Python's universal newlines also break on a lone ``\\r``, U+0085,
U+2028, U+2029 and a few control characters. The first may stand raw between the tokens of a
valid JSON line and the next three raw inside its strings, so they would cut one valid line
into two invalid ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


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
