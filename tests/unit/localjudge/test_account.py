"""``AccountLimits``: per-minute buckets, OpenAI's headers and 429s, and the counters."""

from __future__ import annotations

import http.client
import json
import math
from typing import Any

import pytest

from consumer.cli import main
from consumer.judge.prompt import PROBE_MESSAGES
from consumer.localjudge.account import QUOTA_MESSAGE, AccountLimits, request_tokens
from consumer.localjudge.buckets import Bucket, duration_text, whole_ms, whole_seconds
from consumer.localjudge.replies import Reply, completion
from consumer.localjudge.responder import local_judge_server


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Inner:
    """A responder that answers every request 200, and counts them."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: dict[str, Any]) -> Reply:
        self.calls += 1
        return Reply(body=completion("{}", "m", 1, 1), headers={"x-inner": "1"}, delay_s=0.3)


def scoring(content: str = "Judge this.", **fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": content}], **fields}


def probe() -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [dict(m) for m in PROBE_MESSAGES]}


def error_of(reply: Reply) -> dict[str, Any]:
    assert isinstance(reply.body, dict)
    error: dict[str, Any] = reply.body["error"]
    return error


@pytest.mark.parametrize(("seconds", "text"), [
    (0.0, "0s"), (0.012, "12ms"), (0.1, "100ms"), (0.0004, "1ms"), (1.0, "1s"), (1.5, "1.5s"),
    (20.162, "20.162s"), (60.0, "1m0s"), (360.0, "6m0s"), (123.5, "2m3.5s"), (3600.0, "1h0m0s"),
])
def test_durations_read_as_openai_writes_them(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


def test_waits_in_whole_units_round_up() -> None:
    assert (whole_seconds(0.1), whole_ms(0.1)) == (1, 100)
    assert (whole_seconds(1.0), whole_ms(1.0)) == (1, 1000)
    assert (whole_seconds(1.2), whole_ms(0.0101)) == (2, 11)


def test_a_bucket_starts_full_and_refills_a_sixtieth_of_its_limit_a_second() -> None:
    bucket = Bucket(600, now=0.0)
    assert bucket.level(0.0) == 600
    assert bucket.reset_s(0.0) == 0
    bucket.take(0.0, 600)
    assert bucket.level(0.0) == 0
    assert bucket.wait_s(0.0, 1) == pytest.approx(0.1)
    assert bucket.level(1.0) == pytest.approx(10)
    assert bucket.reset_s(1.0) == pytest.approx(59)
    assert bucket.level(500.0) == 600  # capacity: idling saves no more than a minute's worth
    assert bucket.wait_s(500.0, 600) == 0
    assert bucket.wait_s(500.0, 601) == math.inf


def test_a_full_account_admits_a_minute_at_once_then_a_sixtieth_a_second() -> None:
    clock, inner = Clock(), Inner()
    account = AccountLimits(inner, requests_per_minute=600, clock=clock)
    assert all(account(scoring()).status == 200 for _ in range(600))
    assert account(scoring()).status == 429
    clock.now += 0.25  # 2.5 requests refilled
    assert [account(scoring()).status for _ in range(3)] == [200, 200, 429]
    assert inner.calls == 602  # a refused request never reaches the model
    stats = account.stats()
    assert (stats.arrived, stats.answered, stats.statuses[429]) == (604, 602, 2)
    assert stats.rejected == {"rate_limit_exceeded": 2}
    assert stats.limited_by == {"requests": 2}
    assert stats.admitted_between(clock.now, clock.now + 1) == 2
    assert account.requests_per_s == 10


def test_an_account_kept_saturated_starts_empty() -> None:
    clock = Clock()
    account = AccountLimits(Inner(), requests_per_minute=600, full=False, clock=clock)
    assert account(scoring()).status == 429
    clock.now += 0.1
    assert [account(scoring()).status for _ in range(2)] == [200, 429]


def test_every_reply_carries_the_headers_and_keeps_the_inner_ones() -> None:
    clock = Clock()
    account = AccountLimits(Inner(), requests_per_minute=600, tokens_per_minute=60_000,
                            clock=clock)
    reply = account(scoring("x" * 400, max_tokens=300))  # 100 + 300 tokens
    assert reply.status == 200
    assert reply.delay_s == 0.3
    assert dict(reply.headers) == {
        "x-ratelimit-limit-requests": "600",
        "x-ratelimit-remaining-requests": "599",
        "x-ratelimit-reset-requests": "100ms",
        "x-ratelimit-limit-tokens": "60000",
        "x-ratelimit-remaining-tokens": "59600",
        "x-ratelimit-reset-tokens": "400ms",
        "x-inner": "1",
    }


def test_the_requests_429_in_openais_words() -> None:
    clock = Clock()
    account = AccountLimits(Inner(), requests_per_minute=600, clock=clock,
                            organization="org-xxx")
    for _ in range(600):
        account(scoring())
    reply = account(scoring())
    assert reply.status == 429
    assert error_of(reply) == {
        "message": "Rate limit reached for gpt-4o-mini in organization org-xxx on requests per "
                   "min (RPM): Limit 600, Used 600, Requested 1. Please try again in 100ms.",
        "type": "requests", "code": "rate_limit_exceeded", "param": None,
    }
    assert reply.headers["retry-after"] == "1"
    assert reply.headers["retry-after-ms"] == "100"
    assert reply.headers["x-ratelimit-remaining-requests"] == "0"
    assert reply.headers["x-ratelimit-reset-requests"] == "1m0s"


def test_the_tokens_429_counts_the_prompt_and_the_answer_budget() -> None:
    clock = Clock()
    account = AccountLimits(Inner(), tokens_per_minute=1000, clock=clock)
    request = scoring("x" * 400, max_completion_tokens=300)
    assert request_tokens(request) == 400
    assert [account(request).status for _ in range(2)] == [200, 200]
    reply = account(request)
    error = error_of(reply)
    assert error["type"] == "tokens"
    assert error["message"].endswith(
        "on tokens per min (TPM): Limit 1000, Used 800, Requested 400. "
        "Please try again in 12s.")
    assert (reply.headers["retry-after"], reply.headers["retry-after-ms"]) == ("12", "12000")
    assert "x-ratelimit-limit-requests" not in reply.headers  # only the limits it has
    assert account.stats().limited_by == {"tokens": 1}


def test_a_request_above_the_whole_tokens_limit_is_too_large_whatever_the_wait() -> None:
    account = AccountLimits(Inner(), tokens_per_minute=1000, clock=Clock())
    reply = account(scoring(max_tokens=2000))
    assert reply.status == 429
    assert error_of(reply)["message"].startswith(
        "Request too large for gpt-4o-mini in organization org-local on tokens per min (TPM): "
        "Limit 1000, Requested 2002.")
    assert "retry-after" not in reply.headers


def test_out_of_credit_every_request_is_insufficient_quota_without_retry_after() -> None:
    inner = Inner()
    account = AccountLimits(inner, requests_per_minute=600, clock=Clock())
    account.insufficient_quota = True
    for request in (scoring(), probe()):
        reply = account(request)
        assert reply.status == 429
        assert error_of(reply) == {"message": QUOTA_MESSAGE, "type": "insufficient_quota",
                                   "code": "insufficient_quota", "param": None}
        assert "retry-after" not in reply.headers
        assert "retry-after-ms" not in reply.headers
    assert inner.calls == 0
    account.insufficient_quota = False  # credit bought
    assert account(scoring()).status == 200
    assert account.stats().rejected == {"insufficient_quota": 2}


def test_without_headers_a_429_says_only_retry_after() -> None:
    clock = Clock()
    account = AccountLimits(Inner(), requests_per_minute=60, headers=False, clock=clock)
    replies = [account(scoring()) for _ in range(61)]
    assert dict(replies[0].headers) == {"x-inner": "1"}
    assert replies[-1].status == 429
    assert dict(replies[-1].headers) == {"Retry-After": "1"}
    assert error_of(replies[-1])["code"] == "rate_limit_exceeded"


def test_probes_count_against_the_account() -> None:
    clock = Clock()
    account = AccountLimits(Inner(), requests_per_minute=2, clock=clock)
    assert [account(probe()).status, account(probe()).status] == [200, 200]
    assert account(scoring()).status == 429
    assert account.stats().probes == 2


def test_utilisation_is_admitted_over_refilled() -> None:
    clock = Clock()
    account = AccountLimits(Inner(), requests_per_minute=60, clock=clock)
    start = clock.now
    for _ in range(10):  # one a second at a one-a-second account, 3 tries each second
        for _ in range(3):
            account(scoring())
        clock.now += 1
    assert account.remaining()["requests"] == pytest.approx(40)  # 60 - 30 + 10 refilled
    assert account.utilisation(start, clock.now) == pytest.approx(3.0)  # the full bucket's burst
    account = AccountLimits(Inner(), requests_per_minute=60, clock=clock)
    for _ in range(60):
        account(scoring())  # the burst spent
    start = clock.now
    for _ in range(10):
        clock.now += 1
        account(scoring())
        account(scoring())
    assert account.utilisation(start + 0.5, clock.now + 0.5) == pytest.approx(1.0)
    assert account.stats().statuses == {200: 70, 429: 10}


def test_the_local_judge_serves_the_limits_on_the_wire() -> None:
    server = local_judge_server(port=0, requests_per_minute=1)
    body = json.dumps({"model": "local-judge", "messages": list(PROBE_MESSAGES)}).encode()
    with server:
        answers = []
        for _ in range(2):
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            try:
                connection.request("POST", "/v1/chat/completions", body=body)
                response = connection.getresponse()
                answers.append((response.status, dict(response.getheaders()), response.read()))
            finally:
                connection.close()
    (first, first_headers, _), (second, second_headers, second_body) = answers
    assert (first, first_headers["x-ratelimit-remaining-requests"]) == (200, "0")
    assert second == 429
    assert second_headers["retry-after"] == "60"
    assert json.loads(second_body)["error"]["code"] == "rate_limit_exceeded"


def test_the_command_line_hands_the_limits_to_the_local_judge(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served: list[tuple[Any, ...]] = []
    monkeypatch.setattr("consumer.localjudge.responder.serve", lambda *args: served.append(args))
    assert main(["local-judge", "--port", "0", "--requests-per-minute", "600"]) == 0
    assert served == [("127.0.0.1", 0, 600, None)]
    with pytest.raises(SystemExit):
        main(["local-judge", "--tokens-per-minute", "0"])
    assert "must be a positive whole number" in capsys.readouterr().err
