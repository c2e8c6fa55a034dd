"""The hand-labelled rules sample is the deterministic rules' spec: every label agrees."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from consumer.evaluation.labelled_rules import RULES_SAMPLE, LabelledTrace, read_rules_sample
from consumer.inputs.trace_json import decode_trace
from consumer.rules.base import DeterministicRule
from consumer.rules.registry import REGISTRY, RuleOptions

ROWS = read_rules_sample()
RULES = [build(RuleOptions()) for build in REGISTRY.values()]


def found(rule: DeterministicRule, row: LabelledTrace) -> str:
    if not rule.applies(row.trace, None):
        return "not_applicable"
    return rule.check(row.trace, None).verdict


def test_every_row_is_a_trace_json_event_labelled_for_every_rule() -> None:
    lines = RULES_SAMPLE.read_text(encoding="utf-8").splitlines()
    assert len(ROWS) == len(lines) >= 40
    for line, row in zip(lines, ROWS, strict=True):
        assert decode_trace(line.encode("utf-8")) == row.trace
        assert set(row.labels) == set(REGISTRY), row.trace.trace_id
    assert len({row.trace.trace_id for row in ROWS}) == len(ROWS)


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_every_label_agrees(rule: DeterministicRule) -> None:
    disagreeing = [
        (row.trace.trace_id, row.labels[rule.name], seen)
        for row in ROWS if (seen := found(rule, row)) != row.labels[rule.name]
    ]
    assert disagreeing == []


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_the_sample_holds_every_outcome_of_every_rule(rule: DeterministicRule) -> None:
    counts = Counter(row.labels[rule.name] for row in ROWS)
    assert min(counts[label] for label in ("pass", "fail", "not_applicable")) >= 3, counts


def test_labels_are_read_as_written() -> None:
    first = json.loads(RULES_SAMPLE.read_text(encoding="utf-8").splitlines()[0])
    assert ROWS[0].labels == first["labels"]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        pytest.param('{"trace_id": "t", "output": "x"}', "labels must map", id="no-labels"),
        pytest.param('{"trace_id": "t", "labels": {"missing_citation": "passed"}}',
                     "labels must map", id="unknown-label"),
        pytest.param('{"output": "x", "labels": {}}', "validation error", id="not-a-trace"),
        pytest.param("[1]", "labels must map", id="not-an-object"),
    ],
)
def test_a_bad_row_is_refused_with_its_line(tmp_path: Path, line: str, problem: str) -> None:
    sample = tmp_path / "rules.jsonl"
    sample.write_text('{"trace_id": "ok", "labels": {}}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=problem) as caught:
        read_rules_sample(sample)
    assert str(caught.value).startswith(f"{sample}:2: ")
