"""Verdict rules: pass at or above the threshold, error never passes, ids deterministic."""

from __future__ import annotations

import json

import pytest

from consumer.errors import JudgeError
from consumer.prompt import parse_answer
from consumer.verdicts import MAX_ERROR_MESSAGE_CHARS, Context, errored, judged, verdict_id
from schemas.judge import JudgeAnswer
from schemas.trace import MAX_TRACE_ID_CHARS, TraceEvent
from schemas.verdict import Source, Truncation, Usage, VerdictEvent

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


def test_secrets_are_redacted_from_what_the_judge_wrote() -> None:
    secret = "sk-live-0123456789abcdef"
    context = Context("judge-model", 0.5, Truncation(), SOURCE, secrets=(secret,))
    answer = JudgeAnswer(score=2, reason=f"saw {secret}", unsupported_claims=[secret, "ok"])
    verdict = judged(TRACE, answer, None, 1, context)
    assert (verdict.reason, verdict.unsupported_claims) == (
        "saw [REDACTED]", ["[REDACTED]", "ok"])
    error = errored(TRACE, JudgeError("judge_http_400", f"Bearer {secret[:10]}"), None, 1, context)
    assert error.error is not None
    assert error.error.message == "Bearer [REDACTED]"


def test_a_long_error_message_is_cut() -> None:
    verdict = errored(TRACE, JudgeError("judge_http_400", "m" * 100_000), None, 1, ctx(0.5))
    assert verdict.error is not None
    assert len(verdict.error.message) == MAX_ERROR_MESSAGE_CHARS
    assert verdict.error.message.endswith("…")


# Every character of text becomes at most six bytes of JSON (a control character: \u0000).
WORST_CHAR = "\x00"


def test_the_largest_possible_verdict_fits_a_kafka_record() -> None:
    """The judge's text, the error message and the trace id are bounded, so a verdict is
    always publishable (Kafka's default record limit is 1 MiB), whatever the judge returns."""
    trace = TraceEvent(trace_id="\U0001f600" * MAX_TRACE_ID_CHARS, output="x")
    huge = WORST_CHAR * 20_000  # each text is far over its bound (and 200 claims over theirs)
    answer = parse_answer(json.dumps({"score": 1, "reason": huge,
                                      "unsupported_claims": [huge] * 200}))
    source = Source(topic="t" * 249, partition=2**31 - 1, offset=2**63 - 1)
    context = Context("m" * 256, 0.5, Truncation(documents_cut=list(range(12))), source)
    for verdict in (judged(trace, answer, Usage(), 2**31, context),
                    errored(trace, JudgeError("judge_http_400", huge), None, 1, context)):
        size = len(verdict.model_dump_json().encode("utf-8")) + len(verdict.verdict_id)
        assert size < 512 * 1024, verdict.verdict
