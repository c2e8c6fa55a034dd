"""``missing_citation@v2``: does an answer with retrieved documents cite them? No model.

Applies to a trace with an answer and retrieved documents; a trace from spans whose documents
are the model's prompt (no retriever recorded any: ``context_source`` ``llm_input``) has none.
Passes when the answer's prose holds a citation marker or names a retrieved document by id,
title or URL (``citations.py``), code aside (``markdown_code.py``). ``CITATION_PATTERN``, when set,
replaces all of that: a match of it in the prose is then the only citation, for a team whose
answers cite in a house style (``{{cite:kb-17}}``) and whose bare URLs are not citations.
It is an RE2 pattern (``linear_regex.py``), matched in time linear in the answer however it
is written; one RE2 cannot run (a backreference, a look-around) is refused at start.

A marker must point at a document that was retrieved (``citation_targets.py``: ``[2]`` at the
second of them, ``(source: ...)`` at one by its name): an answer with one that points at
nothing fails, whatever else it cites, its reason listing those markers. A made-up source is
worse than none (a reader trusts it), and the answer that has one beside real ones is still
an answer whose sources cannot all be checked. A ``CITATION_PATTERN`` match is checked so only
when the pattern has a group named ``doc``: what the group took must name a document.

The whole answer is read, not the judge's cut of it: a marker at the very end of a long
answer counts. The reason names the first marker found, or says none was and how many
documents the answer had. v1 passed every marker, ``[7]`` beside two documents too.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Mapping, Sequence

from consumer.redaction import known_secrets, redact
from consumer.rules.base import Outcome
from consumer.rules.citation_targets import Retrieved, footnotes, points_at
from consumer.rules.citations import DEFAULT_MARKERS, first_reference
from consumer.rules.linear_regex import LinearMatch, LinearPattern, compile_linear
from consumer.rules.markdown_code import prose
from consumer.telemetry.origin import TraceOrigin
from schemas.trace import TraceEvent

MAX_QUOTED_CHARS = 80
MAX_DANGLING_LISTED = 5  # markers quoted in a reason; the rest counted
DOC_GROUP = "doc"  # CITATION_PATTERN's group naming what a match cites
# A sentence no citation pattern should match any part of with nothing.
_EMPTY_PROBE = "An answer without a citation, 2024."


def compile_citation_pattern(text: str) -> LinearPattern:
    """``CITATION_PATTERN`` compiled for RE2; ValueError when it is no regular expression, uses
    what RE2 refuses (a backreference, a look-around), or matches an empty string (every
    answer would count as cited)."""
    try:
        pattern = compile_linear(text)
    except ValueError:
        with warnings.catch_warnings():  # re's FutureWarning on "[[" is no reason to stop
            warnings.simplefilter("ignore")
            try:
                re.compile(text)
            except re.error as exc:  # no regular expression at all: say what re says
                raise ValueError(f"not a regular expression: {exc}") from None
        raise  # a Python one RE2 cannot run: what it uses, and why that is refused
    if any(match.end() == match.start()
           for probe in ("", _EMPTY_PROBE) for match in pattern.finditer(probe)):
        raise ValueError("matches an empty string, so every answer would count as cited")
    return pattern


class MissingCitation:
    """Fails an answer that cites none of its retrieved documents."""

    name = "missing_citation"
    version = "v2"

    def __init__(self, pattern: LinearPattern | None = None,
                 secrets: Sequence[str] = ()) -> None:
        self.pattern = pattern  # None: the default markers and the documents' names
        self.secrets = known_secrets(secrets)  # out of what the reason quotes, before its cut

    def applies(self, trace: TraceEvent, origin: TraceOrigin | None) -> bool:
        """An answer, and documents a retriever returned for it."""
        retrieved = origin is None or origin.context_source == "retrieval"
        return trace.has_output and bool(trace.retrieved_documents) and retrieved

    def check(self, trace: TraceEvent, origin: TraceOrigin | None) -> Outcome:
        """Pass when the answer cites and every marker points at a retrieved document, naming
        the first citation; fail naming the markers that point at nothing, or saying none."""
        answer, documents = trace.output or "", trace.retrieved_documents or []
        text = prose(answer)
        checked = self.pattern is None or DOC_GROUP in self.pattern.groups
        retrieved = Retrieved(documents)
        first: str | None = None  # the first marker, and the first that points somewhere
        cited: str | None = None
        dangling: dict[str, None] = {}  # in order, each once
        verdicts: dict[str, bool] = {}  # by what is resolved: a hostile answer repeats one
        definitions = footnotes(text) if self.pattern is None else {}
        for marker in self._markers(text):
            first = first or marker.group()
            if not checked:
                break
            target = self._target(marker)
            if target not in verdicts:
                verdicts[target] = self._points_at(target, retrieved, definitions)
            if not verdicts[target]:
                dangling.setdefault(marker.group())
            elif cited is None:
                cited = marker.group()
        count = len(documents)
        had = f"it had {count} retrieved document{'s' if count != 1 else ''}"
        if dangling:
            return Outcome(False, self._dangling(list(dangling), cited, had))
        if first is not None:
            return Outcome(True, f"citation marker {self._quoted(first)} found")
        if self.pattern is None and (named := first_reference(text, retrieved.names)):
            return Outcome(True, f"cites a retrieved document by its {named.kind}: "
                                 f"{self._quoted(named.text)}")
        what = "no match of CITATION_PATTERN" if self.pattern else "no citation marker"
        in_code = next(self._markers(answer), None) if text != answer else None
        aside = f" (only inside code: {self._quoted(in_code.group())})" if in_code else ""
        return Outcome(False, f"{what} in the answer{aside}; {had}")

    def _markers(self, text: str) -> Iterator[LinearMatch]:
        """The non-empty matches: a CITATION_PATTERN such as ``\\b$`` matches only empty
        text, which cites nothing (the start-up check cannot see every such pattern)."""
        return (match for match in (self.pattern or DEFAULT_MARKERS).finditer(text)
                if match.end() > match.start())

    def _target(self, marker: LinearMatch) -> str:
        """What is resolved: the marker, or for CITATION_PATTERN what its ``doc`` group took."""
        return marker.group() if self.pattern is None else (marker.group(DOC_GROUP) or "")

    def _points_at(self, target: str, retrieved: Retrieved,
                   definitions: Mapping[str, str]) -> bool:
        if self.pattern is None:
            return points_at(target, retrieved, definitions)
        return retrieved.named_in(target)

    def _dangling(self, dangling: list[str], cited: str | None, had: str) -> str:
        quoted = ", ".join(map(self._quoted, dangling[:MAX_DANGLING_LISTED]))
        more = len(dangling) - MAX_DANGLING_LISTED
        listed = quoted + (f" and {more} more" if more > 0 else "")
        if len(dangling) == 1:
            head = f"citation marker {listed} points at no retrieved document"
        else:
            head = f"{len(dangling)} citation markers point at no retrieved document: {listed}"
        also = f" (cited as well: {self._quoted(cited)})" if cited else ""
        return f"{head}; {had}{also}"

    def _quoted(self, text: str) -> str:
        # Redacted before the cut: a secret cut in two would no longer be found whole.
        text = " ".join(redact(text, self.secrets).split())
        if len(text) > MAX_QUOTED_CHARS:
            text = text[:MAX_QUOTED_CHARS - 1] + "…"
        return f'"{text}"'
