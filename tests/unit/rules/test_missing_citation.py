"""missing_citation@v2 on real-looking answers: what counts as a citation, what only looks like
one, when the rule applies, and CITATION_PATTERN."""

from __future__ import annotations

import re
from typing import Any

import pytest

from consumer.rules.missing_citation import MissingCitation, compile_citation_pattern
from consumer.telemetry.origin import TraceOrigin
from schemas.trace import TraceEvent

DOCUMENTS: list[Any] = [
    {"id": "kb-1047", "content": "Annual plans are refunded pro rata within 5-7 business days.",
     "metadata": {"title": "Refund Policy",
                  "url": "https://www.help.acme.io/articles/refund-policy/"}},
    {"id": "7", "content": "Monthly plans can be cancelled at any time.",
     "metadata": {"title": "Cancelling your subscription",
                  "source": "s3://help-center/exports/cancel-subscription.md"}},
    "Consumed add-on credits are not refundable.",
]
RULE = MissingCitation()


def trace(output: str | None, documents: list[Any] | None = DOCUMENTS) -> TraceEvent:
    return TraceEvent.model_validate(
        {"trace_id": "t", "output": output, "retrieved_documents": documents})


def origin(context_source: str) -> TraceOrigin:
    return TraceOrigin(span_id="00000000000000aa", project_id=None, session_id=None,
                       context_source=context_source, spans=3, root_seen=True,
                       closed_by="quiet")


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        pytest.param("Annual plans are refunded pro rata [1].", '"[1]"', id="numeric"),
        pytest.param("Refunds are prorated and credits are excluded [1, 3].", '"[1, 3]"',
                     id="grouped"),
        pytest.param("It takes 5-7 business days [1-2].", '"[1-2]"', id="range"),
        pytest.param("Annual plans are refunded pro rata[1][3].", '"[1]"', id="glued-to-word"),
        pytest.param("Refunds are prorated.[^1]\n\n[^1]: Refund Policy", '"[^1]"',
                     id="footnote"),
        pytest.param("年度套餐按比例退款【1】。", '"【1】"', id="cjk-lenticular"),
        pytest.param("年度套餐按比例退款\uff3b\uff12\uff3d。", '"\uff3b\uff12\uff3d"',
                     id="full-width-brackets"),
        pytest.param("Credits are not refundable【4:0†credits-faq.md】.",
                     '"【4:0†credits-faq.md】"', id="openai-file-search"),
        pytest.param("Refunds are prorated (source: Refund Policy).",
                     '"(source: Refund Policy)"', id="source-parenthesis"),
        pytest.param("Cancel any time [Sources: help centre, cancel-subscription.md].",
                     '"[Sources: help centre, cancel-subscription.md]"', id="sources-bracket"),
        pytest.param("Refunds take a week [doc1].", '"[doc1]"', id="azure-doc"),
        pytest.param("Refunds take a week (Source 1).", '"(Source 1)"', id="source-number"),
        pytest.param("Refunds take a week; see KB-1047.", 'by its id: "KB-1047"',
                     id="document-id"),
        pytest.param("Refunds take a week [7].", '"[7]"', id="numeric-id-in-brackets"),
        pytest.param("Details: https://help.acme.io/articles/refund-policy.",
                     'by its URL: "https://help.acme.io/articles/refund-policy"', id="url"),
        pytest.param("Details at help.acme.io/articles/refund-policy#proration today.",
                     'by its URL: "help.acme.io/articles/refund-policy#proration"',
                     id="bare-url-with-fragment"),
        pytest.param("Cancel any time, as *Cancelling your subscription* says.",
                     'by its title: "Cancelling your subscription"', id="title"),
        pytest.param('Our "Refund Policy" covers it.', 'by its title: "Refund Policy"',
                     id="short-title-quoted"),
        pytest.param("Cancelling is instant (see cancel-subscription.md).",
                     'by its id: "cancel-subscription.md"', id="file-name-of-a-path"),
        pytest.param("Use `xs[1]` for the second item; refunds are prorated [2].", '"[2]"',
                     id="marker-beside-inline-code"),
        pytest.param("Prorated.\n```json\n{\"ids\": [1, 2]}\n```\nSee [3].", '"[3]"',
                     id="marker-after-a-code-block"),
        pytest.param(("Annual plans are refunded pro rata. " * 3000) + "[1]", '"[1]"',
                     id="huge-answer-marker-at-the-very-end"),
    ],
)
def test_cited_answers_pass_naming_the_first_citation(answer: str, reason: str) -> None:
    outcome = RULE.check(trace(answer), None)
    assert (outcome.passed, outcome.score, outcome.verdict) == (True, 1.0, "pass")
    assert reason in outcome.reason


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param("Annual plans are refunded pro rata within a week.", id="plain"),
        pytest.param('The page says refunds "has [sic] been" processed.', id="sic"),
        pytest.param("The --format flag is [optional]; usage: export PATH [--since DATE].",
                     id="optional"),
        pytest.param("- [x] Export invoices\n- [ ] Use credits [TODO: check]", id="checkboxes"),
        pytest.param("These rules date from the 2024 handbook [2024].", id="year"),
        pytest.param("The first element, argv[0], is the script.", id="zero-index"),
        pytest.param("Read it with `sys.argv[1]` and `argv[1:3]`.", id="inline-code"),
        pytest.param("```python\nprint([1, 2, 3][1])\n```", id="fenced-code"),
        pytest.param("```python\nsecond = sys.argv[2]", id="unclosed-fence"),
        pytest.param("Go to the [billing page](https://app.acme.io/billing).",
                     id="link-to-a-page-not-retrieved"),
        pytest.param("EU terms: https://help.acme.io/articles/refund-policy/eu", id="subpage"),
        pytest.param("See help.acme.io/articles/refund-policy-eu.", id="sibling-page"),
        pytest.param("Our refund policy is simple: pro rata.", id="two-word-title-as-phrase"),
        pytest.param("(1) Open Billing, (2) pick a plan, (7) confirm.", id="numbered-steps"),
        pytest.param("It takes 7 days; kb-10470 is unrelated.", id="id-inside-a-longer-id"),
        pytest.param("Answer (3) is (Source) unclear.", id="source-without-number"),
    ],
)
def test_uncited_answers_fail_saying_how_many_documents(answer: str) -> None:
    outcome = RULE.check(trace(answer), None)
    assert (outcome.passed, outcome.score, outcome.verdict) == (False, 0.0, "fail")
    assert outcome.reason.startswith("no citation marker in the answer")
    assert outcome.reason.endswith("it had 3 retrieved documents")


def test_a_marker_only_in_code_is_named_in_the_reason() -> None:
    outcome = RULE.check(trace("Use `items[1]` to get it."), None)
    assert not outcome.passed
    assert '(only inside code: "[1]")' in outcome.reason


def test_one_document_is_counted_in_the_singular() -> None:
    outcome = RULE.check(trace("No citation.", ["One doc."]), None)
    assert outcome.reason.endswith("it had 1 retrieved document")


def test_a_long_marker_is_cut_in_the_reason() -> None:
    outcome = RULE.check(trace(f"Final (source: kb-1047, {'x' * 500})."), None)
    assert outcome.passed
    assert len(outcome.reason) < 120
    assert "…" in outcome.reason


@pytest.mark.parametrize(
    ("event", "context_source", "applies"),
    [
        pytest.param(trace("Refunds are prorated."), None, True, id="answer-and-documents"),
        pytest.param(trace("Refunds are prorated."), "retrieval", True, id="spans-retrieval"),
        pytest.param(trace("Refunds are prorated."), "llm_input", False,
                     id="spans-documents-are-the-prompt"),
        pytest.param(trace("Refunds are prorated [1].", None), None, False, id="no-documents"),
        pytest.param(trace("Refunds are prorated [1].", []), None, False, id="empty-documents"),
        pytest.param(trace(None), None, False, id="no-answer"),
        pytest.param(trace(" \n\t"), None, False, id="blank-answer"),
    ],
)
def test_applies_to_an_answer_with_retrieved_documents(
        event: TraceEvent, context_source: str | None, applies: bool) -> None:
    seen = None if context_source is None else origin(context_source)
    assert RULE.applies(event, seen) is applies


def test_citation_pattern_replaces_every_default() -> None:
    rule = MissingCitation(compile_citation_pattern(r"\{\{cite:[\w-]+\}\}"))
    cited = rule.check(trace("Refunds are prorated {{cite:kb-1047}}."), None)
    assert cited.passed
    assert '"{{cite:kb-1047}}"' in cited.reason
    for answer in ("Refunds are prorated [1].", "See KB-1047.",
                   "See https://help.acme.io/articles/refund-policy"):
        outcome = rule.check(trace(answer), None)
        assert not outcome.passed, answer
        assert outcome.reason.startswith("no match of CITATION_PATTERN in the answer")


def test_citation_pattern_in_code_does_not_count() -> None:
    rule = MissingCitation(compile_citation_pattern(r"<cite>\d+</cite>"))
    outcome = rule.check(trace("Like `<cite>1</cite>` this."), None)
    assert not outcome.passed
    assert "only inside code" in outcome.reason


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        pytest.param("[unclosed", "not a regular expression", id="invalid"),
        pytest.param(".*", "matches an empty string", id="matches-empty"),
        pytest.param(r"\b", "matches an empty string", id="zero-width"),
        pytest.param(r"\[?\d*\]?", "matches an empty string", id="all-optional"),
    ],
)
def test_citation_patterns_that_would_mislead_are_refused(pattern: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        compile_citation_pattern(pattern)


def test_rule_is_named_and_versioned() -> None:
    assert (RULE.name, RULE.version) == ("missing_citation", "v2")
