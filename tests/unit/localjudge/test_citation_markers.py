"""Citation markers are not claims: the heuristic sets them aside before it reads numbers and
words, so an answer that cites its sources scores as the same answer without its markers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from consumer.cli import main
from consumer.localjudge.citation_markers import without_citations
from consumer.localjudge.heuristic import assess
from consumer.localjudge.responder import local_judge_server
from tests.support.workers import worker_env

DOCUMENTS = ["Paris is the capital of France.", "The Eiffel Tower is 330 metres tall."]
CITED = [
    pytest.param("Paris is the capital of France (source: doc-1).", id="source-id"),
    pytest.param("Paris is the capital of France [1].", id="number"),
    pytest.param("Paris is the capital of France[1].", id="number-glued"),
    pytest.param("Paris is the capital of France [1, 2].", id="numbers"),
    pytest.param("Paris is the capital of France [12-40].", id="range"),
    pytest.param("Paris is the capital of France\u30101\u3011.", id="lenticular"),
    pytest.param("Paris is the capital of France\u30104:0\u2020cities.pdf\u3011.",
                 id="assistants-annotation"),
    pytest.param("Paris is the capital of France [doc-1].", id="bracketed-id"),
    pytest.param("Paris is the capital of France [kb-1047].", id="bracketed-kb-id"),
    pytest.param("Paris is the capital of France [doc1].", id="azure-docN"),
    pytest.param("Paris is the capital of France (Source 2).", id="source-number"),
    pytest.param("Paris is the capital of France.[^1]\n\n[^1]: Atlas 2024, p. 12",
                 id="footnote-and-its-definition"),
    pytest.param("Paris is the capital of France [2][1]. The Eiffel Tower is 330 metres "
                 "tall [3].", id="two-sentences"),
]


@pytest.mark.parametrize("answer", CITED)
def test_an_answer_that_cites_its_sources_is_supported(answer: str) -> None:
    assessment = assess(DOCUMENTS, answer)
    assert assessment.score == 5, assessment.reason
    assert assessment.unsupported_claims == ()
    assert "Numbers not found" not in assessment.reason


def test_the_markers_do_not_merge_or_split_sentences() -> None:
    answer = "Paris is the capital of France.[^1] The Eiffel Tower is 330 metres tall [2]."
    assert len(assess(DOCUMENTS, answer).claims) == 2


@pytest.mark.parametrize(
    ("answer", "missing"),
    [
        pytest.param("Paris is the capital of France [2024].", "2024", id="a-year"),
        pytest.param("Paris is the capital of France (1889).", "1889", id="parenthesised"),
        pytest.param("The Eiffel Tower is 500 metres tall [1].", "500", id="a-cited-wrong-number"),
    ],
)
def test_numbers_that_are_no_marker_are_still_checked(answer: str, missing: str) -> None:
    assessment = assess(DOCUMENTS, answer)
    assert assessment.score < 3
    assert f"Numbers not found in the documents: {missing}." in assessment.reason


@pytest.mark.parametrize(
    ("text", "read"),
    [
        pytest.param("days [1]. Next", "days. Next", id="space-before-goes"),
        pytest.param("A [1] b", "A b", id="between-words"),
        pytest.param("A[1]b", "A b", id="glued-words-kept-apart"),
        pytest.param("See [sic], [optional], [x], [ ] and [TODO: check].",
                     "See [sic], [optional], [x], [ ] and [TODO: check].", id="not-markers"),
        pytest.param("Done.\n[^note]: Handbook, p. 3\nMore.", "Done.\n\nMore.",
                     id="footnote-definition-line"),
        pytest.param("Use [--format FMT] or [--verbose].", "Use [--format FMT] or [--verbose].",
                     id="usage-syntax"),
    ],
)
def test_without_citations(text: str, read: str) -> None:
    assert without_citations(text) == read


@pytest.mark.parametrize("marker", ["(source: doc-1)", "[1]"])
def test_check_with_the_local_judge_passes_a_cited_answer(
    marker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The issue's case: ``groundedness check`` failed it ("Numbers not found in the
    documents: 1") while ``missing_citation`` passed it."""
    trace = {"trace_id": "t-1", "output": f"Paris is the capital of France {marker}.",
             "retrieved_documents": [{"id": "doc-1", "content": DOCUMENTS[0]}]}
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps(trace) + "\n")
    with local_judge_server(port=0) as server:
        for name, value in worker_env({}, server.url,
                                      RULES="groundedness,missing_citation").items():
            monkeypatch.setenv(name, value)
        code = main(["check", str(path)])
    verdicts = {v["rule"]: v for v in map(json.loads, capsys.readouterr().out.splitlines())}
    assert code == 0
    assert {rule: v["verdict"] for rule, v in verdicts.items()} == {
        "groundedness": "pass", "missing_citation": "pass"}
    assert verdicts["groundedness"]["raw_score"] == 5
