"""An honest offline groundedness heuristic: lexical support of each answer sentence.

Each answer sentence is a claim, once its citation markers are set aside (``[1]``,
``(source: doc-1)``, footnotes: ``citation_markers.py``; a marker claims nothing). Its
content words (lower-cased, stopwords dropped, a light suffix-stripping stemmer, number words
read as digits) are looked up in every window of two consecutive document sentences; the
claim's support is the best window's weighted share of its words found there (numbers weigh
double). A number in the claim that appears nowhere in the documents caps the claim's
support at ``MISSING_NUMBER_CAP``. The answer's support is the
mean over its claims; sentences without content words (greetings) make no claim. No
documents leaves every claim unsupported. Support maps to 1-5 through ``CUT_POINTS``.

It knows words, not meaning: a claim that reuses the documents' words but negates or
reverses them (``A is more reactive than B``) looks supported. On the bundled labelled sample
(514 Factcheck-GPT claims, raw >= 3 passes) its balanced accuracy is 0.650 (recall 0.44 on
grounded, 0.86 on ungrounded), 0.637 held out when the pass cut is chosen on the other half;
``scripts/heuristic-accuracy`` (``consumer.evaluation.heuristic_accuracy``) measures it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from consumer.localjudge.citation_markers import without_citations

# Named in the local judge's model id (``responder.MODEL``): raised whenever the same answer
# and documents may score differently, so verdicts of one version are never mixed with another's.
HEURISTIC_VERSION = 2  # 2: citation markers set aside; 1 read them as words and numbers
# Support needed for raw scores 2, 3, 4, 5. Only the 3 cut (the pass cut at the demo
# threshold 0.5) was tuned: it maximises balanced accuracy on the bundled sample over
# heuristic_accuracy.PASS_CUT_GRID; the others are spaced around it by hand.
CUT_POINTS: tuple[float, float, float, float] = (0.5, 0.75, 0.85, 0.95)
MISSING_NUMBER_CAP = 0.4
NUMBER_WEIGHT = 2.0
WINDOW_SENTENCES = 2
STEM_CHARS = 6

_STOPWORD_TEXT = """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can cannot could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in into
    is it its itself let me more most my myself no nor not of off on only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    may might must shall many much include includes including known often well however used use
    uses hello hi thanks thank please sure glad help happy question
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
NUMBER_WORDS = {
    "zero": "0", "one": "1", "once": "1", "single": "1", "first": "1", "two": "2",
    "twice": "2", "second": "2", "three": "3", "thrice": "3", "third": "3", "four": "4",
    "fourth": "4", "five": "5", "fifth": "5", "six": "6", "sixth": "6", "seven": "7",
    "seventh": "7", "eight": "8", "eighth": "8", "nine": "9", "ninth": "9", "ten": "10",
    "tenth": "10", "eleven": "11", "twelve": "12", "hundred": "100", "thousand": "1000",
    "million": "1000000", "billion": "1000000000",
}  # fmt: skip
SUFFIXES = (
    "ational", "ization", "fulness", "iveness", "ations", "ation", "ments", "ment", "ness",
    "ings", "ing", "ies", "ied", "edly", "ed", "ly", "es", "s", "er", "est",
)  # fmt: skip
_WORD = re.compile(r"[a-z0-9]+(?:[.,][0-9]+)*")
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"'\u201d)\]]))\s+(?=[\"'\u201c(\[]*[A-Z0-9])")
_ABBREVIATION = re.compile(r"(?:\b[A-Za-z]|Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|vs|etc|No|Inc|Ltd|Co)\.$")


@dataclass(frozen=True, slots=True)
class Claim:
    """One answer sentence and how well the documents support it (0-1)."""

    sentence: str
    support: float
    missing_numbers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Assessment:
    """The heuristic's verdict on one answer."""

    score: int
    support: float
    reason: str
    unsupported_claims: tuple[str, ...]
    claims: tuple[Claim, ...]


def document_texts(documents: Iterable[Any]) -> list[str]:
    """The text of each document: a string as is, an object's ``content``."""
    return [
        str(doc.get("content", "")) if isinstance(doc, dict) else str(doc) for doc in documents
    ]


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``, not split after initials and common abbreviations."""
    pieces = [p.strip() for p in _SENTENCE_END.split(text.strip()) if p.strip()]
    merged: list[str] = []
    for piece in pieces:
        if merged and _ABBREVIATION.search(merged[-1]):
            merged[-1] = f"{merged[-1]} {piece}"
        else:
            merged.append(piece)
    return merged


def stem(word: str) -> str:
    """A light stem: number words as digits, one suffix stripped, cut to ``STEM_CHARS``."""
    if word in NUMBER_WORDS:
        return NUMBER_WORDS[word]
    if any(c.isdigit() for c in word):
        return word
    for suffix in SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)] + ("y" if suffix in ("ies", "ied") else "")
            break
    return word[:STEM_CHARS]


def content_tokens(text: str) -> list[str]:
    """Stemmed content words of ``text`` (stopwords and single letters dropped)."""
    lowered = text.lower().replace("\u2019", "'").replace("'s", "")
    words = (w.replace(",", "") for w in _WORD.findall(lowered))
    return [stem(w) for w in words if w not in STOPWORDS and (len(w) > 1 or w.isdigit())]


def _is_number(token: str) -> bool:
    return any(c.isdigit() for c in token)


def claim_support(
    sentence: str, windows: Sequence[frozenset[str]], vocabulary: frozenset[str]
) -> Claim | None:
    """How well the best document window supports one sentence; None if it claims nothing."""
    weights = {t: NUMBER_WEIGHT if _is_number(t) else 1.0 for t in content_tokens(sentence)}
    if not weights:
        return None
    total = sum(weights.values())
    best = max(
        (sum(w for t, w in weights.items() if t in win) / total for win in windows), default=0.0
    )
    missing = tuple(t for t in weights if _is_number(t) and t not in vocabulary)
    support = min(best, MISSING_NUMBER_CAP) if missing else best
    return Claim(sentence=sentence, support=support, missing_numbers=missing)


def raw_score(support: float, cut_points: Sequence[float] = CUT_POINTS) -> int:
    """Map support (0-1) onto the judge's 1-5."""
    return 1 + sum(support >= cut for cut in cut_points)


def assess(
    documents: Sequence[str], answer: str, cut_points: Sequence[float] = CUT_POINTS
) -> Assessment:
    """Score ``answer`` against ``documents``: 1-5, a reason and the unsupported sentences."""
    windows: list[frozenset[str]] = []
    for document in documents:
        sentences = [content_tokens(s) for s in split_sentences(document)]
        for i in range(len(sentences)):
            windows.append(frozenset(t for s in sentences[i : i + WINDOW_SENTENCES] for t in s))
    vocabulary = frozenset().union(*windows)
    claimed = split_sentences(without_citations(answer))
    found = (claim_support(s, windows, vocabulary) for s in claimed)
    claims = tuple(c for c in found if c is not None)
    if not claims:
        return Assessment(5, 1.0, "The answer makes no factual claim.", (), ())
    support = sum(c.support for c in claims) / len(claims)
    unsupported = tuple(c.sentence for c in claims if c.support < cut_points[1])
    numbers = sorted({n for c in claims for n in c.missing_numbers})
    reason = (
        f"Offline word-overlap heuristic: {len(claims) - len(unsupported)} of {len(claims)} "
        f"answer sentences are supported by the documents (support {support:.2f})."
    )
    if not documents:
        reason += " No documents were given."
    if numbers:
        reason += f" Numbers not found in the documents: {', '.join(numbers)}."
    return Assessment(raw_score(support, cut_points), support, reason, unsupported, claims)
