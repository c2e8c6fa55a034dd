"""Verdict rules: pass at or above the threshold, error never passes, ids deterministic."""

from __future__ import annotations

import pytest

from consumer.errors import JudgeError
from consumer.verdicts import Context, errored, judged, verdict_id
from schemas.judge import JudgeAnswer
from schemas.trace import TraceEvent
from schemas.verdict import Source, Truncation, VerdictEvent

TRACE = TraceEvent(trace_id="trace-1", output="answer")
SOURCE = Source(topic="llm-traces", partition=2, offset=41)


def ctx(threshold: float) -> Context:
    return Context("judge-model", threshold, Truncation(), SOURCE)


@pytest.mark.parametrize(
    ("raw", "threshold", "outcome"),
    [
        pytest.param(3, 0.5, "pass", id="at-threshold-passes"),
        pytest.param(2, 0.5, "fail", id="below-fails"),
        pytest.param(5, 1.0, "pass", id="perfect-at-one"),
        pytest.param(4, 1.0, "fail", id="four-below-one"),
        pytest.param(1, 0.0, "pass", id="zero-threshold"),
        pytest.param(4, 0.75, "pass", id="quarter-step"),
    ],
)
def test_pass_when_score_reaches_threshold(raw: int, threshold: float, outcome: str) -> None:
    answer = JudgeAnswer(score=raw, reason="r", unsupported_claims=[])
    verdict = judged(TRACE, answer, None, 12, ctx(threshold))
    assert verdict.verdict == outcome
    assert verdict.score == (raw - 1) / 4
    assert verdict.raw_score == raw
    assert verdict.threshold == threshold


def test_error_has_no_score_and_never_passes() -> None:
    verdict = errored(TRACE, JudgeError("refused", "no"), None, 5, ctx(0.0))
    assert verdict.verdict == "error"
    assert verdict.score is None
    assert verdict.raw_score is None
    assert verdict.error is not None
    assert (verdict.error.type, verdict.error.message) == ("refused", "no")


def test_verdict_carries_the_contract_fields() -> None:
    verdict = judged(TRACE, JudgeAnswer(score=4, reason="ok"), None, 7, ctx(0.5))
    data = verdict.model_dump(mode="json")
    assert set(data) == set(VerdictEvent.model_fields)
    assert data["schema_version"] == 1
    assert data["rule"] == "groundedness"
    assert data["prompt_version"] == "groundedness@v1"
    assert data["judge_model"] == "judge-model"
    assert data["source"] == {"topic": "llm-traces", "partition": 2, "offset": 41}
    assert data["evaluated_at"].endswith("Z")


def test_verdict_id_is_deterministic_per_trace_and_prompt_version() -> None:
    assert verdict_id("trace-1") == verdict_id("trace-1")
    assert verdict_id("trace-1") != verdict_id("trace-2")
    assert verdict_id("trace-1", "groundedness@v2") != verdict_id("trace-1")
    first = judged(TRACE, JudgeAnswer(score=4, reason="a"), None, 1, ctx(0.5))
    again = errored(TRACE, JudgeError("x", "y"), None, 1, ctx(0.9))
    assert first.verdict_id == again.verdict_id == verdict_id("trace-1")
