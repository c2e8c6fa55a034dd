"""The default markers on RE2 match what they matched on Python's ``re``: the same spans, in
every answer tried, space of every script included."""

from __future__ import annotations

import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.rules.citations import DEFAULT_MARKERS
from consumer.rules.linear_regex import LinearPattern, compile_linear

_NUMBER = "[1-9][0-9]{0,2}"
# The markers as they were, on re: the specification the RE2 pattern is checked against.
RE_MARKERS = re.compile(
    rf"""
      \[\s*{_NUMBER}(?:\s*[,;\-\u2013\u2014]\s*{_NUMBER})*\s*\]
    | \[\^[^\]\s]{{1,40}}\]
    | \u3010\s*[0-9\uff10-\uff19][^\u3011\n]{{0,80}}\u3011
    | \uff3b\s*[1-9\uff11-\uff19][0-9\uff10-\uff19]{{0,2}}\s*\uff3d
    | \[\s*(?:doc(?:ument)?|source|ref(?:erence)?)\s*[#:]?\s*{_NUMBER}\s*\]
    | \(\s*(?:doc(?:ument)?|source|ref(?:erence)?)\s*[#:]?\s*{_NUMBER}\s*\)
    | \(\s*(?:sources?|refs?|references?)\s*:[^()\n]{{1,1000}}\)
    | \[\s*(?:sources?|refs?|references?)\s*:[^\[\]\n]{{1,1000}}\]
    """,
    re.VERBOSE | re.IGNORECASE,
)
SPACES = "".join(chr(c) for c in range(sys.maxunicode + 1) if re.fullmatch(r"\s", chr(c)))
# Brackets, digits (ASCII and full-width), separators, the keywords' letters in both cases
# and their Unicode case folds (the long s, the dotless i, the Kelvin sign), spaces, letters of
# two and three bytes in UTF-8 (offsets are counted in characters) and a lone surrogate.
_PIECES = [*"[]()^:#,;-\u2013\u2014\u3010\u3011\uff3b\uff3d\u2020\n ", *"0129\uff10\uff11\uff19",
           *"docDOCumentsrfSRFe\u017f\u0131\u212a\u00a0\u3000\u2028x\u00e9\u5e74\ud800",
           "doc", "Document", "source", "Sources", "ref", "References", "sic", "2023"]


def spans(pattern: re.Pattern[str] | LinearPattern, text: str) -> list[tuple[int, int]]:
    return [(match.start(), match.end()) for match in pattern.finditer(text)]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=60).map("".join))
def test_re2_markers_match_what_the_re_markers_matched(answer: str) -> None:
    assert spans(DEFAULT_MARKERS, answer) == spans(RE_MARKERS, answer)


@pytest.mark.parametrize("space", list(SPACES), ids=[f"U+{ord(c):04X}" for c in SPACES])
def test_every_python_space_is_a_space_in_the_markers(space: str) -> None:
    for answer in (f"[{space}1{space},{space}2{space}]", f"({space}Source{space}2{space})",
                   f"[^a{space}b]"):
        assert spans(DEFAULT_MARKERS, answer) == spans(RE_MARKERS, answer), answer


def test_markers_of_every_kind_are_found_in_one_answer() -> None:
    answer = ("A [1, 2-3] B[^n] C\u3010\uff14:0\u2020faq.md\u3011 D\uff3b\uff12\uff3d "
              "E [Doc 2] F (SOURCE #3) G (sources: faq) H [Refs: kb-1] I [sic] [2023] [0]")
    found = [match.group() for match in DEFAULT_MARKERS.finditer(answer)]
    assert found == ["[1, 2-3]", "[^n]", "\u3010\uff14:0\u2020faq.md\u3011", "\uff3b\uff12\uff3d",
                     "[Doc 2]", "(SOURCE #3)", "(sources: faq)", "[Refs: kb-1]"]
    assert found == [match.group() for match in RE_MARKERS.finditer(answer)]


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param("(source:" + "x" * 5000 + ")", id="source-longer-than-its-bound"),
        pytest.param("[1," * 3000 + "x", id="unclosed-list"),
        pytest.param("(source: [sources: " * 400, id="two-bounded-runs-at-once"),
        pytest.param("\u3010" + "1" * 200 + "\u3011", id="lenticular-longer-than-its-bound"),
    ],
)
def test_long_hostile_answers_match_as_before(answer: str) -> None:
    assert spans(DEFAULT_MARKERS, answer) == spans(RE_MARKERS, answer)


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param("caf\u00e9 [kb-1] \u5e74 [kb-22]", id="multibyte"),
        pytest.param("\ud800 [kb-1] \U0001f600 [kb-22]", id="surrogate-and-astral"),
        pytest.param("[kb-1] [kb-22]", id="ascii"),
    ],
)
def test_offsets_and_groups_are_counted_in_characters(answer: str) -> None:
    pattern = compile_linear(r"\[(?P<doc>[\w-]+)\]")
    expected = [(m.start(), m.end(), m.group(), m.group("doc"))
                for m in re.finditer(r"\[(?P<doc>[\w-]+)\]", answer)]
    assert [(m.start(), m.end(), m.group(), m.group("doc"))
            for m in pattern.finditer(answer)] == expected
