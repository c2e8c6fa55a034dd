"""Finding a retrieved document's name in an answer: the same place however often the name
occurs, and in time linear in the answer (a name inside a run of its own letters)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.rules import citations
from consumer.rules.citations import Reference, first_reference
from consumer.rules.missing_citation import MissingCitation, compile_citation_pattern
from schemas.trace import TraceEvent


def _one_by_one(text: str, reference: Reference) -> int | None:
    """The specification: every occurrence looked at in turn."""
    at = text.find(reference.text)
    while at != -1:
        if citations._names(text, at, at + len(reference.text), reference):
            return at
        at = text.find(reference.text, at + 1)
    return None


# Answers made of a few characters, so that names occur often and stand beside every kind
# of neighbour: letters, digits, the id marks, spaces, brackets, quotes.
_ANSWER = st.text(alphabet="ab1-_ [](\"'*", min_size=0, max_size=400)
_NAME = st.text(alphabet="ab1-_ ", min_size=1, max_size=4).filter(lambda t: t.strip() == t)


@settings(max_examples=400, deadline=None)
@given(answer=_ANSWER, name=_NAME, anywhere=st.booleans())
def test_the_regex_scan_finds_what_checking_each_occurrence_finds(
    answer: str, name: str, anywhere: bool
) -> None:
    reference = Reference("id", name, anywhere=anywhere)
    expected = _one_by_one(answer, reference)
    assert citations._first_naming(answer, reference) == expected
    # Past the one-by-one limit from the first occurrence: the regex decides everything.
    pattern = citations._naming_pattern(reference)
    match = pattern.search(answer)
    assert (match.start() if match else None) == expected


def test_a_name_inside_a_run_of_its_letters_is_found_at_the_run_end_only_when_set_off() -> None:
    answer = "a" * 100_000 + " [" + "a" * 5 + "]"
    reference = Reference("id", "a" * 5, anywhere=False)
    assert citations._first_naming(answer, reference) == 100_002
    assert citations._first_naming("a" * 100_000, reference) is None


def test_hundreds_of_names_in_a_huge_answer_of_their_letters_fail_as_before() -> None:
    documents = [{"content": "x", "id": "a" * n} for n in range(1, 257)]
    trace = TraceEvent(trace_id="t", output="a" * 400_000, retrieved_documents=documents)
    outcome = MissingCitation().check(trace, None)
    assert not outcome.passed
    assert first_reference("a" * 400_000, citations.references(trace.retrieved_documents or [])) \
        is None


def test_a_pattern_that_only_ever_matches_empty_text_cites_nothing() -> None:
    # At the end of an answer ending in a letter: neither probe of the start-up check sees it.
    rule = MissingCitation(compile_citation_pattern(r"\b$"))
    trace = TraceEvent(trace_id="t", output="It has [sic] been said",
                       retrieved_documents=[{"content": "x"}])
    outcome = rule.check(trace, None)
    assert not outcome.passed
    assert outcome.reason.startswith("no match of CITATION_PATTERN")
