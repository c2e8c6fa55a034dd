"""Output and error lines read as the synchronous judge reads the same responses."""

from __future__ import annotations

import json
from typing import Any

from consumer.judge.result import Answered, TraceFailed
from consumer.localjudge.replies import completion, error_body
from consumer.replay.batch.outcomes import Unanswered, read_result_line
from schemas.verdict import Usage


def output(custom_id: str, status: int, body: dict[str, Any]) -> str:
    return json.dumps({"id": "batch_req_1", "custom_id": custom_id, "error": None,
                       "response": {"status_code": status, "request_id": "r", "body": body}})


def verdict(score: int) -> str:
    return json.dumps({"score": score, "reason": "because", "unsupported_claims": []})


def test_an_answer_is_answered_with_its_usage_and_the_batchs_latency() -> None:
    read = read_result_line(output("t1", 200, completion(verdict(4), "m", 100, 20)), 1234)
    assert read is not None
    assert read.custom_id == "t1"
    assert isinstance(read.outcome, Answered)
    assert (read.outcome.answer.score, read.outcome.latency_ms, read.outcome.attempts) == (
        4, 1234, 1)
    assert read.outcome.usage == Usage(prompt_tokens=100, completion_tokens=20, total_tokens=120)


def test_a_refusal_is_the_traces_error_and_an_unreadable_answer_is_asked_again() -> None:
    refused = completion(None, "m", 10, 5, refusal="I can't help with that.")
    read = read_result_line(output("t", 200, refused), 0)
    assert read is not None
    assert isinstance(read.outcome, TraceFailed)
    assert (read.outcome.kind, read.outcome.message) == ("refused", "I can't help with that.")
    cut = completion("", "m", 10, 400)
    cut["choices"][0]["finish_reason"] = "length"
    read = read_result_line(output("t", 200, cut), 0)
    assert read is not None
    assert isinstance(read.outcome, Unanswered)
    assert read.outcome.kind == "unparseable_answer"
    assert read.outcome.usage.total_tokens == 410  # spent, though the answer is not used
    read = read_result_line(output("t", 200, {"not": "a completion"}), 0)
    assert read is not None
    assert isinstance(read.outcome, Unanswered)
    assert read.outcome.kind == "judge_bad_response"


def test_http_errors_are_mapped_by_the_judges_failure_map() -> None:
    cases = {
        (400, "content_filter", "The response was filtered."): ("refused", TraceFailed),
        (400, "context_length_exceeded", "maximum context length is 8192"):
            ("context_too_long", TraceFailed),
        (400, "unsupported_parameter", "Unsupported parameter: 'max_tokens' is not supported"):
            ("max_tokens_rejected", Unanswered),
        (429, "rate_limit_exceeded", "Rate limit reached"): ("judge_rate_limited", Unanswered),
        (503, None, "overloaded"): ("judge_http_503", Unanswered),
        (401, "invalid_api_key", "Incorrect API key"): ("judge_http_401", Unanswered),
    }
    for (status, code, message), (kind, expected) in cases.items():
        param = "max_tokens" if code == "unsupported_parameter" else None
        body = error_body(message, code=code, param=param)
        read = read_result_line(output("t", status, body), 9)
        assert read is not None
        assert isinstance(read.outcome, expected), (status, code)
        assert not isinstance(read.outcome, Answered)
        assert read.outcome.kind == kind
        assert read.outcome.message == f"Error code: {status} - {message}"


def test_lines_without_a_response_carry_the_batchs_reason() -> None:
    for code, kind in (("batch_expired", "batch_expired"), ("batch_cancelled", "batch_cancelled"),
                       ("request_timeout", "judge_timeout"), ("weird", "batch_weird")):
        line = json.dumps({"id": "x", "custom_id": "t", "response": None,
                           "error": {"code": code, "message": f"{code} happened"}})
        read = read_result_line(line, 0)
        assert read is not None
        assert read.outcome == Unanswered("t", kind, f"{code} happened")


def test_a_line_that_names_no_request_is_left_out() -> None:
    assert read_result_line("{not json", 0) is None
    assert read_result_line(json.dumps({"response": None}), 0) is None
    assert read_result_line(json.dumps([1, 2]), 0) is None
