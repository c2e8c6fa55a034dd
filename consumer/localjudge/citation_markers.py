"""Citation markers set aside before the heuristic reads an answer's claims (pure).

A marker says where a claim came from; it claims nothing. Read as words, ``[1]`` or
``(source: doc-1)`` is a number, or a word, that no document holds, and the heuristic failed
every answer that cited its sources (``Numbers not found in the documents: 1``) while
``missing_citation`` passed it. Set aside, each with the spaces before it (``days [1].``
reads ``days.``; a word right after a marker is kept apart by a space):

- the markers ``missing_citation`` counts, its own pattern
  (``consumer.rules.citations.DEFAULT_MARKERS``): ``[1]``, ``[1, 2]``, ``[12-40]``, ``[^1]``,
  ``【1】`` and ``【4:0†file.pdf】``, ``[doc1]``, ``(Source 2)``, ``(source: ...)``;
- a bracketed identifier, one token of four characters or more that starts with a letter and
  holds a digit or one of ``-_:./#``: ``[doc-1]``, ``[kb-1047]``, ``[leave-requests.pdf]``.
  The rule finds those by the retrieved documents' ids, which the judge's data block does not
  carry (it holds their texts alone), so their shape stands in here; ``[sic]``, ``[optional]``,
  ``[x]`` and ``[2024]`` stay, as for the rule;
- a Markdown footnote definition, a line ``[^1]: Employee Handbook 2024, p. 12``: the source,
  described.

Only the default markers: the local judge does not see the worker's ``CITATION_PATTERN``. An
index in code (``argv[1]``) loses its number too, which names no fact either.
"""

from __future__ import annotations

import re

from consumer.rules.citations import DEFAULT_MARKERS
from consumer.rules.linear_regex import LinearPattern

_FOOTNOTE_DEFINITION = re.compile(r"^[ \t]{0,3}\[\^[^\]\s]{1,40}\]:[^\n]*$", re.MULTILINE)
_BRACKETED_IDENTIFIER = re.compile(
    r"\[[ \t]*(?=[^\W\d_][\w\-:./#]{0,80}[\d\-_:./#])[^\W\d_][\w\-:./#]{3,80}[ \t]*\]"
)
_MARKERS = (DEFAULT_MARKERS, _BRACKETED_IDENTIFIER)


def without_citations(text: str) -> str:
    """``text`` with its citation markers and footnote definitions set aside."""
    text = _FOOTNOTE_DEFINITION.sub("", text)
    for pattern in _MARKERS:
        text = _cut(text, pattern)
    return text


def _cut(text: str, pattern: re.Pattern[str] | LinearPattern) -> str:
    pieces: list[str] = []
    at = 0
    for match in pattern.finditer(text):
        pieces.append(text[at:match.start()].rstrip(" \t"))
        after = text[match.end():match.end() + 1]
        pieces.append(" " if after.isalnum() else "")
        at = match.end()
    pieces.append(text[at:])
    return "".join(pieces)
