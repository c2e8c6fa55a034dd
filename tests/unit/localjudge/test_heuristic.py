"""The offline groundedness heuristic: pure cases (its accuracy: test_heuristic_accuracy)."""

from __future__ import annotations

import pytest

from consumer.localjudge.heuristic import (
    CUT_POINTS,
    assess,
    content_tokens,
    document_texts,
    raw_score,
    split_sentences,
)

DOCUMENTS = [
    "The Eiffel Tower was completed in 1889 for the World's Fair in Paris. It is 330 metres "
    "tall and was designed by the engineering company of Gustave Eiffel.",
    "Paris is the capital of France. The city hosts millions of tourists each year.",
]


@pytest.mark.parametrize(
    "answer",
    [
        "The Eiffel Tower was completed in 1889.",
        "Gustave Eiffel's company designed the tower, which is 330 metres tall.",
        "Paris is the capital of France.",
        "Hello! The Eiffel Tower, in Paris, was completed in 1889.",
    ],
    ids=["copied-fact", "paraphrase-across-sentences", "second-document", "greeting-plus-fact"],
)
def test_supported_answers_pass(answer: str) -> None:
    assessment = assess(DOCUMENTS, answer)
    assert assessment.score >= 4
    assert assessment.unsupported_claims == ()


@pytest.mark.parametrize(
    ("answer", "unsupported"),
    [
        ("Quantum chromodynamics explains gluon confinement.", "Quantum chromodynamics"),
        ("The Eiffel Tower was completed in 1925.", "1925"),
        ("The Eiffel Tower is 500 metres tall.", "500"),
        ("The Eiffel Tower was finished in eighteen months by Napoleon's army.", "Napoleon"),
    ],
    ids=["unrelated", "changed-year", "changed-height", "invented-detail"],
)
def test_unsupported_answers_fail(answer: str, unsupported: str) -> None:
    assessment = assess(DOCUMENTS, answer)
    assert assessment.score <= 2
    assert len(assessment.unsupported_claims) == 1
    assert unsupported in assessment.unsupported_claims[0]


def test_a_changed_number_is_named_in_the_reason() -> None:
    assessment = assess(DOCUMENTS, "The Eiffel Tower was completed in 1925.")
    assert "1925" in assessment.reason
    assert assessment.claims[0].missing_numbers == ("1925",)


def test_mixed_answer_lists_only_the_unsupported_sentence() -> None:
    answer = "Paris is the capital of France. The tower was painted gold in 2001."
    assessment = assess(DOCUMENTS, answer)
    assert assessment.unsupported_claims == ("The tower was painted gold in 2001.",)
    assert assessment.score == 2
    assert 0.4 < assessment.support < 0.8


@pytest.mark.parametrize(
    ("documents", "answer", "score"),
    [
        ([], "The Eiffel Tower was completed in 1889.", 1),
        ([], "Hello! Thanks for your question.", 5),
        (DOCUMENTS, "Hi, glad to help!", 5),
        (DOCUMENTS, "", 5),
        (["", "   "], "Paris is the capital of France.", 1),
    ],
    ids=["no-documents", "no-documents-no-claim", "greeting", "empty-answer", "blank-documents"],
)
def test_edge_cases(documents: list[str], answer: str, score: int) -> None:
    assert assess(documents, answer).score == score


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("Marcus Morton was a U.S. Senator. He lived in Massachusetts.", 2),
        ("Dr. Smith said \u201chello.\u201d Then he left!", 2),
        ("It cost 2.5 million dollars. Really?", 2),
        ("One sentence without a full stop", 1),
    ],
    ids=["initials", "abbreviation-and-quotes", "decimal", "no-terminator"],
)
def test_split_sentences(text: str, sentences: int) -> None:
    assert len(split_sentences(text)) == sentences


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("The bridge was completed in 1889", ["bridge", "comple", "1889"]),
        ("It has won the cup twice", ["won", "cup", "2"]),
        ("Costs rose to 1,000 dollars", ["cost", "rose", "1000", "dollar"]),
        ("Completing completed completes", ["comple", "comple", "comple"]),
    ],
    ids=["stopwords-and-stem", "number-word", "thousands-separator", "one-stem"],
)
def test_content_tokens(text: str, tokens: list[str]) -> None:
    assert content_tokens(text) == tokens


@pytest.mark.parametrize(
    ("support", "score"),
    [(0.0, 1), (0.49, 1), (0.5, 2), (0.75, 3), (0.85, 4), (0.95, 5), (1.0, 5)],
    ids=["none", "below-2", "at-2", "at-pass", "at-4", "at-5", "full"],
)
def test_raw_score_cut_points(support: float, score: int) -> None:
    assert raw_score(support) == score


def test_pass_cut_is_the_score_3_boundary() -> None:
    # raw >= 3 is a pass at the demo threshold 0.5, so CUT_POINTS[1] is the tuned pass cut
    assert raw_score(CUT_POINTS[1]) == 3
    assert raw_score(CUT_POINTS[1] - 0.01) == 2


def test_document_texts_read_strings_and_objects() -> None:
    documents = ["plain", {"content": "from an object", "id": "d2"}, {"id": "d3"}, 7]
    assert document_texts(documents) == ["plain", "from an object", "", "7"]
