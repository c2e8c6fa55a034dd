"""``missing_citation@v1``: does an answer with retrieved documents cite them? No model.

Applies to a trace with an answer and retrieved documents; a trace from spans whose documents
are the model's prompt (no retriever recorded any: ``context_source`` ``llm_input``) has none.
Passes when the answer's prose holds a citation marker or names a retrieved document by id,
title or URL (``citations.py``), code aside (``markdown_code.py``). ``CITATION_PATTERN``, when set,
replaces all of that: a match of it in the prose is then the only citation, for a team whose
answers cite in a house style (``{{cite:kb-17}}``) and whose bare URLs are not citations.
It is an RE2 pattern (``linear_regex.py``), matched in time linear in the answer however it
is written; one RE2 cannot run (a backreference, a look-around) is refused at start.

The whole answer is read, not the judge's cut of it: a marker at the very end of a long
answer counts. The reason names the first marker found, or says none was and how many
documents the answer had.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence

from consumer.redaction import known_secrets, redact
from consumer.rules.base import Outcome
from consumer.rules.citations import DEFAULT_MARKERS, first_reference, references
from consumer.rules.linear_regex import LinearMatch, LinearPattern, compile_linear
from consumer.rules.markdown_code import prose
from consumer.telemetry.origin import TraceOrigin
from schemas.trace import TraceEvent

MAX_QUOTED_CHARS = 80
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
    version = "v1"

    def __init__(self, pattern: LinearPattern | None = None,
                 secrets: Sequence[str] = ()) -> None:
        self.pattern = pattern  # None: the default markers and the documents' names
        self.secrets = known_secrets(secrets)  # out of what the reason quotes, before its cut

    def applies(self, trace: TraceEvent, origin: TraceOrigin | None) -> bool:
        """An answer, and documents a retriever returned for it."""
        retrieved = origin is None or origin.context_source == "retrieval"
        return trace.has_output and bool(trace.retrieved_documents) and retrieved

    def check(self, trace: TraceEvent, origin: TraceOrigin | None) -> Outcome:
        """Pass when the answer cites, naming the first citation found."""
        answer, documents = trace.output or "", trace.retrieved_documents or []
        text = prose(answer)
        marker = self._first_marker(text)
        if marker is not None:
            return Outcome(True, f"citation marker {self._quoted(marker.group())} found")
        if self.pattern is None and (cited := first_reference(text, references(documents))):
            return Outcome(True, f"cites a retrieved document by its {cited.kind}: "
                                 f"{self._quoted(cited.text)}")
        what = "no match of CITATION_PATTERN" if self.pattern else "no citation marker"
        in_code = self._first_marker(answer) if text != answer else None
        aside = f" (only inside code: {self._quoted(in_code.group())})" if in_code else ""
        count = len(documents)
        return Outcome(False, f"{what} in the answer{aside}; it had {count} retrieved "
                              f"document{'s' if count != 1 else ''}")


    def _first_marker(self, text: str) -> LinearMatch | None:
        """The first non-empty match: a CITATION_PATTERN such as ``(?=\\[)`` matches only
        empty text, which cites nothing (the start-up check cannot see every such pattern)."""
        return next((match for match in (self.pattern or DEFAULT_MARKERS).finditer(text)
                     if match.end() > match.start()), None)

    def _quoted(self, text: str) -> str:
        # Redacted before the cut: a secret cut in two would no longer be found whole.
        text = " ".join(redact(text, self.secrets).split())
        if len(text) > MAX_QUOTED_CHARS:
            text = text[:MAX_QUOTED_CHARS - 1] + "…"
        return f'"{text}"'
