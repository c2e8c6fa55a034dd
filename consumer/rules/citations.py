"""Where an answer cites its sources: the default markers, and the retrieved documents' ids,
titles and URLs named in it (pure).

The default markers, matched in the answer's prose (``markdown_code.py``: code blanked first):

===================  ====================================================================
``[1]`` ``[1, 2]``   one to three digits from 1, commas, semicolons or dashes between;
``[1-3]``            not ``[0]`` (an index: citations count from 1), not ``[2023]`` (a year)
``[^1]`` ``[^a]``    a Markdown footnote reference
``【1】``             CJK lenticular brackets around a number, OpenAI's ``【4:0†source】`` too;
                     and a number in full-width brackets (U+FF3B, U+FF3D)
``[doc1]``           ``doc``, ``document``, ``source``, ``ref`` or ``reference`` and a number,
``(Source 2)``       in brackets or parentheses (Azure OpenAI "on your data" writes ``[doc1]``)
``(source: ...)``    ``source(s)``, ``ref(s)`` or ``reference(s)``, a colon and what follows,
                     in parentheses or brackets
===================  ====================================================================

So ``[sic]``, ``[optional]``, ``[TODO]``, ``[x]`` and ``[ ]`` checkboxes, ``[2023]`` and a number
in ordinary parentheses are no citation. In prose ``items[1]`` reads as one (``Paris[1]`` is a
common style); written as code, in backticks, it is not. A Markdown link is no citation by its
shape alone: a link to a sign-up page is not a source. It counts when it names a retrieved
document (its URL or title, below) or its text is a marker (``[1](https://...)``).

A retrieved document is cited when the answer names (case ignored, whitespace collapsed):

- its URL (metadata ``url``, ``source``, ``source_url``, ``link``, ``uri``, ``href``): a URL
  in the answer, or a host with a path, that is the document's once scheme, ``www.``,
  fragment and final ``/`` are set aside: ``docs.example.com/refunds`` cites
  ``https://docs.example.com/refunds/``; ``.../refunds-eu`` and ``.../refunds/eu`` do not;
- its id, a path in ``source`` / ``file_path`` (local, or ``s3://`` and the like) or that
  path's file name (``refunds.md``): anywhere when it looks like an identifier (four
  characters or more, a letter and a digit or one of ``-_:./#``: ``kb-0042``, a UUID,
  ``refunds.md``), else only set off by brackets, parentheses, quotes or
  emphasis (``[faq]``; a number only in square brackets, ``[1042]``), since ``faq`` or
  ``1042`` in a sentence is a word or a number, and ``(1)`` numbers a step;
- its title (metadata ``title``, ``document_title``, ``doc_title``, ``name``, ``file_name``):
  anywhere when it has three words or more, else only set off (``"Refund Policy"``), since a
  two-word title is often a phrase the answer uses anyway.

Only the first ``MAX_DOCUMENTS_SEARCHED`` documents are searched for their names.

The markers are matched by RE2 (``linear_regex.py``), in time linear in the answer. The other
patterns here stay on ``re`` and are linear by their shape: ``_URL_IN_TEXT`` starts only at a
token's edge and its labels cannot hold the dot between them, so each character of a host is
read from one start; a ``_naming_pattern`` is a literal between one-character look-arounds.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from consumer.rules.linear_regex import compile_linear
from schemas.trace import Document

MAX_DOCUMENTS_SEARCHED = 256
_CHECKED_ONE_BY_ONE = 64  # occurrences of a name checked in Python before one regex scan
_NUMBER = "[1-9][0-9]{0,2}"
# Python's \s in a str pattern, every one of its characters: RE2's \s is ASCII only.
_SPACE_CHARS = (r"\t-\r\x{1c}-\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}"
                r"\x{202f}\x{205f}\x{3000}")
_S = f"[{_SPACE_CHARS}]"
_NAMED = "(?:doc(?:ument)?|source|ref(?:erence)?)"
_LISTED = "(?:sources?|refs?|references?)"
# RE2, so an answer costs time linear in its length whatever it holds
# (tests/unit/rules/test_linear_markers.py: the same matches as the re pattern these were).
DEFAULT_MARKERS = compile_linear("|".join((
    rf"\[{_S}*{_NUMBER}(?:{_S}*[,;\-\x{{2013}}\x{{2014}}]{_S}*{_NUMBER})*{_S}*\]",
    rf"\[\^[^\]{_SPACE_CHARS}]{{1,40}}\]",
    rf"\x{{3010}}{_S}*[0-9\x{{ff10}}-\x{{ff19}}][^\x{{3011}}\n]{{0,80}}\x{{3011}}",
    rf"\x{{ff3b}}{_S}*[1-9\x{{ff11}}-\x{{ff19}}][0-9\x{{ff10}}-\x{{ff19}}]{{0,2}}{_S}*\x{{ff3d}}",
    rf"\[{_S}*{_NAMED}{_S}*[#:]?{_S}*{_NUMBER}{_S}*\]",
    rf"\({_S}*{_NAMED}{_S}*[#:]?{_S}*{_NUMBER}{_S}*\)",
    rf"\({_S}*{_LISTED}{_S}*:[^()\n]{{1,1000}}\)",
    rf"\[{_S}*{_LISTED}{_S}*:[^\[\]\n]{{1,1000}}\]",
)), ignore_case=True, max_mem_bytes=32 << 20)  # 8 MB: the DFA cache thrashes, 7x slower

Kind = Literal["id", "title", "URL"]
URL_KEYS = ("url", "source", "source_url", "link", "uri", "href")
PATH_KEYS = ("source", "file_path")
_TITLE_KEYS = ("title", "document_title", "doc_title", "name", "file_name")
_WEB = ("http://", "https://")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.\-]*://(?:www\.)?")
# A URL or a bare host with a path in the answer. The look-behind makes each try start at a
# token's edge, so a long run of letters is scanned once, not once per letter.
_URL_IN_TEXT = re.compile(
    r"(?<![\w.\-/])(?:https?://)?(?:www\.)?[a-z0-9\-]+(?:\.[a-z0-9\-]+)+(?:/[^\s<>\"'()\[\]]*)?",
    re.IGNORECASE,
)
_URL_TRAILER = ".,;:!?/"  # sentence punctuation after a URL, and a final slash
_IDENTIFIER_MARK = re.compile(r"[0-9\-_:./#]")
_OPENERS = frozenset("[(\"'\u201c\u2018\u00ab*_")  # brackets, quotes, guillemets, emphasis
_CLOSERS = frozenset("])\"'\u201d\u2019\u00bb*_")


@dataclass(frozen=True, slots=True)
class Reference:
    """A name of one retrieved document that, found in the answer, cites it."""

    kind: Kind
    text: str  # lower-cased, whitespace collapsed; a URL as ``normal_url`` makes it
    anywhere: bool  # False: only when set off by brackets, quotes or emphasis


@dataclass(frozen=True, slots=True)
class Cited:
    """Where the answer names a retrieved document."""

    kind: Kind
    text: str  # as the answer wrote it


def references(documents: Sequence[Document]) -> list[Reference]:
    """The names that cite each of the first ``MAX_DOCUMENTS_SEARCHED`` documents."""
    found: dict[Reference, None] = {}
    for document in documents[:MAX_DOCUMENTS_SEARCHED]:
        for reference in _document_references(document):
            found.setdefault(reference)
    return list(found)


def first_reference(text: str, refs: Sequence[Reference]) -> Cited | None:
    """The earliest place the answer names a retrieved document, if any."""
    if not refs:
        return None
    normal = " ".join(text.split())
    lowered = normal.lower()
    found: list[tuple[int, Cited]] = []
    urls = {reference.text for reference in refs if reference.kind == "URL"}
    if urls:
        cited_url = next((match for match in _URL_IN_TEXT.finditer(normal)
                          if normal_url(match.group()) in urls), None)
        if cited_url is not None:
            found.append((cited_url.start(), Cited("URL", cited_url.group().rstrip(_URL_TRAILER))))
    for reference in refs:
        if reference.kind == "URL":
            continue
        start = _first_naming(lowered, reference)
        if start is not None:
            found.append((start, Cited(reference.kind, normal[start:start + len(reference.text)])))
    return min(found, key=lambda item: item[0])[1] if found else None


def normal_url(url: str) -> str:
    """A URL as compared: lower case, no scheme, ``www.``, fragment or trailing punctuation."""
    bare = _SCHEME.sub("", url.strip().lower()).partition("#")[0]
    return bare.rstrip(_URL_TRAILER)


def _document_references(document: Document) -> Iterator[Reference]:
    metadata = document.metadata or {}
    if document.id is not None:
        yield from _identifier(document.id)
    for key in URL_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value.strip().lower().startswith(_WEB):
            url = normal_url(value)
            if "." in url.partition("/")[0]:  # a host with a domain, not a bare word
                yield Reference("URL", url, anywhere=True)
    for key in PATH_KEYS:
        value = metadata.get(key)
        # A path, or a storage URL (s3://, gs://, file://), whose file name an answer cites.
        if isinstance(value, str) and value.strip() and not value.strip().lower().startswith(_WEB):
            yield from _identifier(value)
            file_name = PurePosixPath(value.strip().replace("\\", "/")).name
            if file_name != value.strip() and "." in file_name.strip("."):
                yield from _identifier(file_name)
    for key in _TITLE_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and (title := " ".join(value.lower().split())):
            yield Reference("title", title, anywhere=len(title.split()) >= 3)


def _identifier(value: str) -> Iterator[Reference]:
    text = " ".join(value.lower().split())
    if text:
        looks_like_one = (len(text) >= 4 and any(c.isalpha() for c in text)
                          and _IDENTIFIER_MARK.search(text) is not None)
        yield Reference("id", text, anywhere=looks_like_one)


def _first_naming(text: str, reference: Reference) -> int | None:
    """Where ``text`` first names ``reference``. Each occurrence is looked at in turn, which
    is fastest for the few an answer has; past ``_CHECKED_ONE_BY_ONE`` (a name inside a run of
    the same letters: ``a`` in "aaaa…"), one regex scan finds the rest, in time linear in the
    answer instead of occurrences x name length."""
    for tried, at in enumerate(_occurrences(text, reference.text)):
        if _names(text, at, at + len(reference.text), reference):
            return at
        if tried >= _CHECKED_ONE_BY_ONE:
            match = _naming_pattern(reference).search(text, at + 1)
            return match.start() if match is not None else None
    return None


@functools.lru_cache(maxsize=1024)
def _naming_pattern(reference: Reference) -> re.Pattern[str]:
    """``_names`` as a regular expression: the name, and what may stand either side of it."""
    name = re.escape(reference.text)
    if reference.anywhere:  # \w is what str.isalnum() accepts, and the underscore
        return re.compile(rf"(?<![\w\-]){name}(?![\w\-])")
    if reference.text.isdigit():
        return re.compile(rf"(?<=\[){name}(?=\])")
    openers = "".join(map(re.escape, sorted(_OPENERS)))
    closers = "".join(map(re.escape, sorted(_CLOSERS)))
    return re.compile(rf"(?<=[{openers}]){name}(?=[{closers}])")


def _occurrences(text: str, needle: str) -> Iterator[int]:
    start = text.find(needle)
    while start != -1:
        yield start
        start = text.find(needle, start + 1)


def _names(text: str, start: int, end: int, reference: Reference) -> bool:
    """Is the occurrence at ``start:end`` the reference, not part of a longer word or id?"""
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    if not reference.anywhere:
        if reference.text.isdigit():  # "(1)" and "*2*" number steps; "[12]" cites
            return before == "[" and after == "]"
        return before in _OPENERS and after in _CLOSERS
    return not (before.isalnum() or before in "_-" or after.isalnum() or after in "_-")
