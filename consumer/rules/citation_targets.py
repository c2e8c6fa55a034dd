"""Whether a citation marker points at a document that was retrieved (pure).

A marker that names nothing retrieved (``[7]`` beside two documents, ``(source: my memory)``) is
no citation: it is a source made up, worse than none, since a reader trusts it. By its kind:

============================  ============================================================
``[2]`` ``[1, 3]`` ``[1-2]``  each number a document's place, counted from 1 (1..N), or a
``[doc2]`` ``(Source 2)``     document's id (``[7]`` cites the document with id ``7``); a
``【2】``, full-width ``[2]``   range lies within 1..N at both ends
``[^2]`` ``[^kb-1]``          a number as above, a label naming a document; or, when the
                              answer defines the footnote (``[^a]: Refund Policy``), a
                              definition that names one
``【4:0†faq.md】``              OpenAI's file search: the name names a document, or the
                              result's index (after the colon, from 0) is below N
``(source: ...)``             what follows the colon names at least one document: its id,
``[Sources: ...]``            title, URL or file name, a folder or file name of its path
                              or URL as words (``pto-policy.pdf``: ``PTO policy``); or an
                              item ``2``, ``doc 2``, ``#2`` for a place
============================  ============================================================

``[0]`` is not a marker at all (an index: ``argv[0]``): an answer that numbers its N sources
from 0 writes ``[0]`` to ``[N-1]``, which lie within 1..N but for ``[0]``, not read.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import PurePosixPath

from consumer.rules.citations import (
    MAX_DOCUMENTS_SEARCHED,
    PATH_KEYS,
    URL_KEYS,
    Reference,
    first_reference,
    references,
)
from schemas.trace import Document

MAX_LABEL_CHARS = 40  # of a footnote's label, as the markers read one
MAX_CONTENTS_CHARS = 1000  # of a footnote's definition, as of a (source: ...) marker's
MAX_CONTENTS_SEARCHED = 256  # distinct contents per answer; past them a marker is not checked
# Whitespace is collapsed first, so these patterns meet single spaces: no run to backtrack on.
_KEYWORD = re.compile(r" ?(?:document|doc|references?|refs?|sources?) ?[#:]? ?", re.IGNORECASE)
_PLACE_ITEM = re.compile(r"\[? ?(?:(?:doc(?:ument)?|source|ref(?:erence)?) ?[#:]? ?|#)?"
                         r"([0-9]{1,3}) ?\]?", re.IGNORECASE)
_ITEM_SEPARATORS = re.compile(r"[,;|&]| and ", re.IGNORECASE)
_NUMBER_OR_DASH = re.compile(r"\d+|[\-\u2013\u2014]")  # full-width digits too; int() reads them
_WORD_SEPARATORS = re.compile(r"[\-_.+%]")
_ITEM_EDGES = " \"'\u201c\u201d\u2018\u2019\u00ab\u00bb*_.()[]"


class Retrieved:
    """What the markers of one answer may point at: how many documents, and their names, each
    worked out when first asked for (most answers need only the count, or nothing)."""

    def __init__(self, documents: Sequence[Document]) -> None:
        self.documents = documents
        self.count = len(documents)
        # Contents searched for names, then taken as naming one: each search reads every name
        # of every document, so thousands of (source: ...) would hold the loop for seconds.
        self.searches_left = MAX_CONTENTS_SEARCHED

    @functools.cached_property
    def names(self) -> list[Reference]:
        """``citations.references`` of the documents."""
        return references(self.documents)

    @functools.cached_property
    def ids(self) -> frozenset[str]:
        """The documents' ids, lower-cased."""
        return frozenset(ref.text for ref in self.names if ref.kind == "id")

    @functools.cached_property
    def loose(self) -> tuple[Reference, ...]:
        """The names as a marker's contents are searched for them: wherever they stand as
        words, but a number id only whole (``(source: 7)``, not "page 7": a place's rival)."""
        return tuple(dataclasses.replace(ref, anywhere=not ref.text.isdecimal())
                     for ref in self.names)

    @functools.cached_property
    def path_words(self) -> tuple[Reference, ...]:
        """The folders and files of the documents' paths and URLs, as words."""
        words = {word: None for document in self.documents[:MAX_DOCUMENTS_SEARCHED]
                 for word in _path_words(document)}
        return tuple(Reference("id", word, anywhere=True) for word in words)

    def place(self, number: int) -> bool:
        """Is ``number`` a document's place (1..N) or a document's id?"""
        return 1 <= number <= self.count or str(number) in self.ids

    def named_in(self, contents: str) -> bool:
        """Do the contents of a marker (after ``source:``, a footnote's definition) name a
        retrieved document: an id, title, URL or file name, or a place?"""
        if self.searches_left <= 0:
            return True
        self.searches_left -= 1
        text = " ".join(contents[:4 * MAX_CONTENTS_CHARS].split())[:MAX_CONTENTS_CHARS]
        if first_reference(text, self.loose) is not None:
            return True
        # Not inside a URL: example.com/refunds is another site's page, not .../refunds's.
        outside_urls = " ".join(word for word in text.split() if "/" not in word)
        if first_reference(outside_urls, self.path_words) is not None:
            return True
        for item in _ITEM_SEPARATORS.split(text):
            item = item.strip(_ITEM_EDGES)
            if item.lower() in self.ids:
                return True
            place = _PLACE_ITEM.fullmatch(item)
            if place is not None and self.place(int(place.group(1))):
                return True
        return False


def _path_words(document: Document) -> Iterator[str]:
    """The folder and file names of the document's path or URL, as words: an untitled
    ``s3://hr-docs/handbook/2024/pto-policy.pdf`` is what ``(Source: Employee Handbook 2024)``
    or ``(source: PTO policy)`` cites. A name of four characters or more with a letter: not
    ``2024``, not ``hr``."""
    metadata = document.metadata or {}
    for key in dict.fromkeys((*PATH_KEYS, *URL_KEYS)):
        value = metadata.get(key)
        if not isinstance(value, str):
            continue
        path = value.strip().replace("\\", "/").partition("://")
        parts = (path[2].split("/")[1:] if path[1] else path[0].split("/"))  # no host
        for part in parts:
            word = " ".join(_WORD_SEPARATORS.sub(" ", PurePosixPath(part).stem).lower().split())
            if len(word) >= 4 and any(char.isalpha() for char in word):
                yield word


def points_at(marker: str, retrieved: Retrieved, definitions: Mapping[str, str]) -> bool:
    """Does ``marker`` (a match of the default markers) point at a document? ``definitions``:
    the answer's ``footnotes``."""
    inner = " ".join(marker[1:-1].split())
    if marker.startswith("[^"):
        return _footnote(inner[1:], retrieved, definitions)
    if marker.startswith("\u3010"):
        return _lenticular(inner, retrieved)
    keyword = _KEYWORD.match(inner) if marker[0] in "[(" else None
    if keyword is None:  # [1, 2-3], or the full-width brackets'
        return _numbers(inner, retrieved)
    rest = inner[keyword.end():]
    if rest.isdecimal():  # [doc2], (Source 2), (source: 2)
        return retrieved.place(int(rest))
    return retrieved.named_in(rest)  # (source: ...), [Sources: ...]


def _numbers(text: str, retrieved: Retrieved) -> bool:
    """Every number a place or an id; both ends of a range places."""
    tokens = _NUMBER_OR_DASH.findall(text)
    for index, token in enumerate(tokens):
        if token.isdecimal():
            in_range = (index > 0 and not tokens[index - 1].isdecimal()) or (
                index + 1 < len(tokens) and not tokens[index + 1].isdecimal())
            number = int(token)
            if not (1 <= number <= retrieved.count if in_range else retrieved.place(number)):
                return False
    return any(token.isdecimal() for token in tokens)


def _footnote(label: str, retrieved: Retrieved, definitions: Mapping[str, str]) -> bool:
    if label.isdecimal() and retrieved.place(int(label)):
        return True
    definition = definitions.get(label)
    if definition is not None:
        return retrieved.named_in(definition)
    return not label.isdecimal() and retrieved.named_in(label)


def footnotes(answer: str) -> dict[str, str]:
    """The answer's footnote definitions, ``[^label]: text`` at a line's start: label -> text
    (the first of a label's, as Markdown reads them). One pass over the answer."""
    found: dict[str, str] = {}
    if "[^" not in answer:
        return found
    for line in answer.split("\n"):
        body = line.lstrip(" ")
        if body.startswith("[^") and (close := body.find("]:", 2, 2 + MAX_LABEL_CHARS + 1)) > 2:
            label = body[2:close]
            if not any(char.isspace() or char == "]" for char in label):
                found.setdefault(label, body[close + 2:])
    return found


def _lenticular(inner: str, retrieved: Retrieved) -> bool:
    head, dagger, name = inner.partition("\u2020")
    if dagger and retrieved.named_in(name):
        return True
    numbers = [int(token) for token in re.findall(r"\d+", head)]
    if ":" in head.replace("\uff1a", ":") and numbers:  # 【message:result】, the result from 0
        return 0 <= numbers[-1] < retrieved.count
    return _numbers(head, retrieved)
