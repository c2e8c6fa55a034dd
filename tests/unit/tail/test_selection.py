"""A record read as a verdict (or refused with a reason), and the filters."""

from __future__ import annotations

import json
from typing import Any

import pytest

from consumer.tail.selection import NotAVerdict, Selection, read_verdict
from tests.support.published_verdicts import a_verdict, published


def test_a_published_verdict_is_read_with_every_field_as_published() -> None:
    verdict = a_verdict("t-1", "missing_citation", "fail", span_id="00f067aa0ba902b7")
    assert read_verdict(published(verdict)) == json.loads(verdict.model_dump_json())


def test_a_newer_workers_verdict_is_still_a_verdict() -> None:
    newer = {**json.loads(published(a_verdict("t-1"))), "rule": "toxicity", "added": [1]}
    assert read_verdict(json.dumps(newer).encode())["rule"] == "toxicity"


@pytest.mark.parametrize(("value", "reason"), [
    pytest.param(None, "no value (a tombstone)", id="tombstone"),
    pytest.param(b"not json", "not JSON (Expecting value: line 1 column 1 (char 0))",
                 id="not-json"),
    pytest.param(b"\xff\xfe", "not UTF-8 text", id="not-utf8"),
    pytest.param(b"[1, 2]", "a JSON list, not an object", id="a-list"),
    pytest.param(b'{"trace_id": "t", "rule": "r", "verdict": "pass"}', "no verdict_id",
                 id="no-id"),
    pytest.param(b'{"verdict_id": "v", "trace_id": 7, "rule": "r", "verdict": "pass"}',
                 "no trace_id", id="trace-id-a-number"),
    pytest.param(b'{"verdict_id": "v", "trace_id": "t", "rule": "r", "verdict": "maybe"}',
                 "verdict is 'maybe', not pass, fail or error", id="unknown-outcome"),
    pytest.param(b'{"trace_id": "t-1", "output": "An answer."}', "no verdict_id",
                 id="a-trace-event"),
])
def test_what_is_not_a_verdict_says_why(value: bytes | None, reason: str) -> None:
    with pytest.raises(NotAVerdict) as refused:
        read_verdict(value)
    assert str(refused.value) == reason


VERDICTS = [json.loads(published(v)) for v in (
    a_verdict("t-1", "groundedness", "pass"),
    a_verdict("t-1", "missing_citation", "fail"),
    a_verdict("t-2", "groundedness", "fail"),
    a_verdict("t-3", "groundedness", "error"),
    a_verdict("t-4", "answered_without_tool", "pass"),
)]


def shown(selection: Selection) -> list[tuple[str, str]]:
    return [(v["trace_id"], v["rule"]) for v in VERDICTS if selection.matches(v)]


@pytest.mark.parametrize(("filters", "expected"), [
    pytest.param({}, [("t-1", "groundedness"), ("t-1", "missing_citation"),
                      ("t-2", "groundedness"), ("t-3", "groundedness"),
                      ("t-4", "answered_without_tool")], id="none-all"),
    pytest.param({"rules": ["groundedness"]},
                 [("t-1", "groundedness"), ("t-2", "groundedness"), ("t-3", "groundedness")],
                 id="rule"),
    pytest.param({"verdicts": ["fail", "error"]},
                 [("t-1", "missing_citation"), ("t-2", "groundedness"),
                  ("t-3", "groundedness")], id="two-verdicts-either"),
    pytest.param({"rules": ["groundedness"], "verdicts": ["fail"]},
                 [("t-2", "groundedness")], id="rule-and-verdict-both"),
    pytest.param({"trace_ids": ["t-1", "t-4"]},
                 [("t-1", "groundedness"), ("t-1", "missing_citation"),
                  ("t-4", "answered_without_tool")], id="trace-ids"),
    pytest.param({"trace_ids": ["t-9"]}, [], id="unknown-trace-none"),
])
def test_filters_are_and_between_them_and_or_within(filters: dict[str, Any],
                                                     expected: list[tuple[str, str]]) -> None:
    assert shown(Selection.of(**filters)) == expected
