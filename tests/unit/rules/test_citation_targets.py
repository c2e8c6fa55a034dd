"""missing_citation@v2: a marker must point at a document that was retrieved; one that points
at nothing fails the answer, listed in the reason (#28 item 5)."""

from __future__ import annotations

from typing import Any

import pytest

from consumer.rules.missing_citation import MissingCitation, compile_citation_pattern
from schemas.trace import TraceEvent

TWO: list[Any] = [
    {"id": "kb-1", "content": "Annual plans are refunded pro rata.",
     "metadata": {"title": "Refund Policy", "url": "https://help.acme.io/articles/refunds"}},
    {"content": "Unused days carry over up to a maximum of 5 days.",
     "metadata": {"file_path": "s3://hr-docs/handbook/2024/pto-policy.pdf", "page": 12}},
]
RULE = MissingCitation()


def check(answer: str, documents: list[Any] = TWO, rule: MissingCitation = RULE) -> Any:
    return rule.check(TraceEvent.model_validate(
        {"trace_id": "t", "output": answer, "retrieved_documents": documents}), None)


@pytest.mark.parametrize(
    "marker",
    [
        pytest.param("[7]", id="number-past-the-documents"),
        pytest.param("[12-40]", id="range-past-the-documents"),
        pytest.param("\u301099\u3011", id="lenticular-number"),
        pytest.param("(source: my memory)", id="source-naming-nothing"),
        pytest.param("[3]", id="one-past-the-last"),
        pytest.param("[1-3]", id="range-ending-past-the-last"),
        pytest.param("[1, 3]", id="list-with-one-past-the-last"),
        pytest.param("[doc3]", id="azure-doc-number"),
        pytest.param("(Source 3)", id="source-number"),
        pytest.param("\uff3b\uff13\uff3d", id="full-width-number"),
        pytest.param("\u30104:2\u2020source\u3011", id="file-search-index-past-the-results"),
        pytest.param("\u30104:5\u2020faq.md\u3011", id="file-search-unknown-name-and-index"),
        pytest.param("[^3]", id="footnote-number"),
        pytest.param("[^memory]", id="footnote-label-naming-nothing"),
        pytest.param("[Sources: Wikipedia, my notes]", id="sources-naming-nothing"),
        pytest.param("(source: https://example.com/refunds)", id="source-url-not-retrieved"),
    ],
)
def test_a_marker_pointing_at_nothing_fails_naming_it(marker: str) -> None:
    outcome = check(f"Annual plans are refunded pro rata {marker}.")
    assert (outcome.passed, outcome.verdict) == (False, "fail")
    assert outcome.reason == (f'citation marker "{marker}" points at no retrieved document; '
                              "it had 2 retrieved documents")


@pytest.mark.parametrize(
    ("marker", "documents"),
    [
        pytest.param("[2]", TWO, id="number"),
        pytest.param("[1-2]", TWO, id="range"),
        pytest.param("[2-1]", TWO, id="range-backwards"),
        pytest.param("[1, 2]", TWO, id="list"),
        pytest.param("[Doc 2]", TWO, id="azure-doc-number"),
        pytest.param("(source 2)", TWO, id="source-number"),
        pytest.param("(source: 2)", TWO, id="source-colon-number"),
        pytest.param("\u30102\u3011", TWO, id="lenticular"),
        pytest.param("\uff3b\uff12\uff3d", TWO, id="full-width"),
        pytest.param("\u30104:1\u2020source\u3011", TWO, id="file-search-index-from-0"),
        pytest.param("\u30104:9\u2020pto-policy.pdf\u3011", TWO, id="file-search-name"),
        pytest.param("[^2]", TWO, id="footnote-number"),
        pytest.param("[^kb-1]", TWO, id="footnote-label-an-id"),
        pytest.param("(source: Refund Policy)", TWO, id="source-title"),
        pytest.param("(source: the Refund Policy page)", TWO, id="source-title-among-words"),
        pytest.param("(Source: Employee Handbook 2024, p. 12)", TWO, id="source-path-folder"),
        pytest.param("(source: PTO policy)", TWO, id="source-file-name-as-words"),
        pytest.param("(sources: kb-1)", TWO, id="source-id"),
        pytest.param("(source: help.acme.io/articles/refunds)", TWO, id="source-url"),
        pytest.param("[Sources: 1, my memory]", TWO, id="sources-one-of-them-a-place"),
        pytest.param("(source: #2)", TWO, id="source-hash-place"),
        pytest.param("[42]", [{"id": "42", "content": "x"}], id="number-that-is-an-id"),
        pytest.param("(source: 42)", [{"id": "42", "content": "x"}], id="source-number-id"),
    ],
)
def test_a_marker_pointing_at_a_retrieved_document_passes(
        marker: str, documents: list[Any]) -> None:
    outcome = check(f"Annual plans are refunded pro rata {marker}.", documents)
    assert (outcome.passed, outcome.reason) == (True, f'citation marker "{marker}" found')


def test_the_issues_four_markers_are_listed_together() -> None:
    outcome = check("Refunds [7], credits [12-40], plans \u301099\u3011 (source: my memory).")
    assert not outcome.passed
    assert outcome.reason == (
        '4 citation markers point at no retrieved document: "[7]", "[12-40]", '
        '"\u301099\u3011", "(source: my memory)"; it had 2 retrieved documents')


def test_a_dangling_marker_fails_beside_valid_ones_which_the_reason_names() -> None:
    outcome = check("Refunds are prorated [1]; credits are final [7]. See kb-1.")
    assert not outcome.passed
    assert outcome.reason == ('citation marker "[7]" points at no retrieved document; it had 2 '
                              'retrieved documents (cited as well: "[1]")')


def test_a_repeated_marker_is_listed_once_and_a_long_list_is_counted() -> None:
    answer = " ".join(f"Claim [{n}]. Again [{n}]." for n in range(3, 12))
    outcome = check(answer)
    assert outcome.reason.startswith('9 citation markers point at no retrieved document: "[3]", '
                                     '"[4]", "[5]", "[6]", "[7]" and 4 more;')


def test_a_footnote_is_decided_by_its_definition_in_the_answer() -> None:
    defined = "Carried over.[^pto]\n\n[^pto]: Leave handbook, pto-policy.pdf"
    assert check(defined).passed
    made_up = "Carried over.[^pto]\n\n[^pto]: my memory"
    outcome = check(made_up)
    assert not outcome.passed
    assert '"[^pto]"' in outcome.reason
    # A number in range cites its document whatever its definition says.
    assert check("Carried over.[^2]\n\n[^2]: page 12").passed


def test_zero_is_no_marker_and_a_zero_based_answer_passes_on_its_other_markers() -> None:
    outcome = check("The first, argv[0], is the script.")
    assert outcome.reason.startswith("no citation marker in the answer")
    assert check("Refunds are prorated [0]; days carry over [1].").passed


def test_a_document_named_in_prose_still_cites_when_no_marker_dangles() -> None:
    outcome = check("See the Refund Policy at https://help.acme.io/articles/refunds.")
    assert outcome.passed
    assert "by its URL" in outcome.reason


def test_a_hostile_answer_of_one_dangling_marker_repeated_fails_naming_it_once() -> None:
    outcome = check("[7] " * 100_000)
    assert outcome.reason == ('citation marker "[7]" points at no retrieved document; '
                              "it had 2 retrieved documents")


def test_a_citation_pattern_with_a_doc_group_is_checked_against_the_documents() -> None:
    rule = MissingCitation(compile_citation_pattern(r"\{\{cite:(?P<doc>[\w-]+)\}\}"))
    assert check("Prorated {{cite:kb-1}}.", rule=rule).passed
    assert check("Carried over {{cite:2}}.", rule=rule).passed
    outcome = check("Prorated {{cite:kb-1}}, final {{cite:kb-9}}.", rule=rule)
    assert outcome.reason == ('citation marker "{{cite:kb-9}}" points at no retrieved document; '
                              'it had 2 retrieved documents (cited as well: "{{cite:kb-1}}")')


def test_a_citation_pattern_without_a_doc_group_is_not_checked() -> None:
    rule = MissingCitation(compile_citation_pattern(r"\{\{cite:[\w-]+\}\}"))
    assert check("Prorated {{cite:kb-9}}.", rule=rule).passed
