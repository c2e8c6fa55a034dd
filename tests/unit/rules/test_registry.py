"""RULES read into rule names, the rules built from them, and the interface they share."""

from __future__ import annotations

import re
from typing import get_args

import pytest

from consumer.judge.prompt import Limits
from consumer.rules.answered_without_tool import AnsweredWithoutTool
from consumer.rules.base import DeterministicRule, JudgedRule, Outcome, rule_id
from consumer.rules.groundedness.evaluator import Evaluator
from consumer.rules.groundedness.rule import Groundedness
from consumer.rules.missing_citation import MissingCitation, compile_citation_pattern
from consumer.rules.registry import (
    GROUNDEDNESS,
    KNOWN_RULES,
    REGISTRY,
    RuleOptions,
    build_rules,
    parse_rules,
)
from schemas.verdict import RuleName
from tests.support.pipeline_fakes import GatedJudge


@pytest.mark.parametrize(
    ("value", "names"),
    [
        pytest.param("groundedness", ("groundedness",), id="default"),
        pytest.param("groundedness,missing_citation,answered_without_tool",
                     ("groundedness", "missing_citation", "answered_without_tool"), id="all"),
        pytest.param(" Missing_Citation , GROUNDEDNESS ", ("missing_citation", "groundedness"),
                     id="spaces-and-case"),
        pytest.param("missing_citation,,answered_without_tool,",
                     ("missing_citation", "answered_without_tool"), id="empty-items"),
        pytest.param("missing_citation,groundedness,missing_citation",
                     ("missing_citation", "groundedness"), id="duplicate-collapsed"),
    ],
)
def test_rules_are_read_in_order_each_once(value: str, names: tuple[str, ...]) -> None:
    assert parse_rules(value) == names


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        pytest.param("groundedness,missing_citations", "unknown rule 'missing_citations'",
                     id="typo"),
        pytest.param("missing_citation@v1", "unknown rule 'missing_citation@v1'",
                     id="versioned-name"),
        pytest.param("", "names no rule", id="empty"),
        pytest.param(" , ", "names no rule", id="only-commas"),
    ],
)
def test_bad_rules_are_refused_naming_the_known_ones(value: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)) as caught:
        parse_rules(value)
    message = str(caught.value)
    assert "\n" not in message
    assert message.endswith(
        "the known rules are groundedness, missing_citation, answered_without_tool")


def test_every_registered_rule_is_known_under_its_own_name() -> None:
    assert (GROUNDEDNESS, *REGISTRY) == KNOWN_RULES
    for name, build in REGISTRY.items():
        rule = build(RuleOptions())
        assert rule.name == name
        assert isinstance(rule, DeterministicRule)
        assert not isinstance(rule, JudgedRule)


def test_build_rules_leaves_groundedness_to_the_judge_and_passes_the_pattern() -> None:
    pattern = compile_citation_pattern(r"\{\{cite:\w+\}\}")
    rules = build_rules(("answered_without_tool", "groundedness", "missing_citation"),
                        RuleOptions(citation_pattern=pattern))
    assert [rule_id(rule) for rule in rules] == ["answered_without_tool@v1",
                                                 "missing_citation@v2"]
    citation = rules[1]
    assert isinstance(citation, MissingCitation)
    assert citation.pattern is pattern
    assert isinstance(rules[0], AnsweredWithoutTool)


def test_outcome_scores() -> None:
    assert (Outcome(True, "r").score, Outcome(True, "r").verdict) == (1.0, "pass")
    assert (Outcome(False, "r").score, Outcome(False, "r").verdict) == (0.0, "fail")


def test_the_judge_is_a_judged_rule_and_not_a_deterministic_one() -> None:
    judged = Groundedness(Evaluator(GatedJudge(), 0.5, Limits()))
    assert isinstance(judged, JudgedRule)
    assert not isinstance(judged, DeterministicRule)
    assert rule_id(judged) == "groundedness@v1"


def test_every_known_rule_is_a_rule_the_verdict_schema_knows() -> None:
    assert set(KNOWN_RULES) == set(get_args(RuleName))
    assert {rule.name for rule in build_rules(KNOWN_RULES, RuleOptions())} == set(REGISTRY)
