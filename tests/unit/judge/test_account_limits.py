"""The account's limits against the production judge over real HTTP: a rate-limit 429 for
everyone is backpressure (slower, never the circuit); ``insufficient_quota`` holds at once;
the headers of every response set the pace and the metrics."""

from __future__ import annotations

import asyncio

import pytest
import structlog

from consumer.errors import JudgeUnavailable
from consumer.judge.result import Answered
from consumer.localjudge.replies import error_reply
from consumer.ops.metrics import REGISTRY
from tests.unit.judge.test_failures import FakeJudge, production_judge, request_for

QUOTA = error_reply(429, "You exceeded your current quota, please check your plan and billing "
                    "details.", "insufficient_quota", "insufficient_quota")
RATE_LIMITED = error_reply(
    429, "Rate limit reached for gpt-4o-mini on requests per min (RPM): Limit 600, Used 600, "
    "Requested 1. Please try again in 100ms.", "requests", "rate_limit_exceeded",
    headers={"retry-after-ms": "100", "x-ratelimit-limit-requests": "600",
             "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "100ms"})


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_rate_limit_storm_for_everyone_slows_the_judge_and_never_opens_the_circuit(
    fake_judge: FakeJudge,
) -> None:
    calls, server = fake_judge
    judge = production_judge(server.url)
    calls.outage = RATE_LIMITED  # every call, probes too: the account is at its limit
    limited = metric("groundedness_judge_rate_limited_total", code="rate_limit_exceeded")
    try:
        work = asyncio.gather(*(judge.judge(request_for(f"a {n}")) for n in range(6)))
        await asyncio.sleep(2.0)  # several rounds of 429s for every trace
        assert judge.breaker.trips == 0
        assert judge.pacer.rate is not None, "paced from the 429s' headers"
        calls.outage = None
        results = await asyncio.wait_for(work, 30)
    finally:
        await judge.close()
    assert all(isinstance(result, Answered) for result in results)
    assert judge.breaker.trips == 0
    assert metric("groundedness_judge_rate_limited_total", code="rate_limit_exceeded") > limited
    # The last headers seen were the 429s' (its answers after carry none).
    assert metric("groundedness_judge_account_remaining", budget="requests") == 0.0


async def test_insufficient_quota_holds_at_once_with_one_line(fake_judge: FakeJudge) -> None:
    calls, server = fake_judge
    judge = production_judge(server.url)
    calls.outage = QUOTA
    try:
        with structlog.testing.capture_logs() as logs:
            with pytest.raises(JudgeUnavailable):
                await asyncio.wait_for(judge.judge(request_for("an answer")), 10)
            scoring = [c for c in calls.calls if c.answer != "probe"]
            assert len(scoring) == 1, "not retried: the account is out of credit for everyone"
            assert judge.breaker.trips == 1
    finally:
        await judge.close()
    opened = [e for e in logs if e["event"] == "judge_circuit_open"]
    assert len(opened) == 1
    assert opened[0]["reason"] == "insufficient_quota"
    assert "quota" in opened[0]["message"]


async def test_the_headers_of_every_answer_set_the_pace_and_the_metrics(
    fake_judge: FakeJudge,
) -> None:
    calls, server = fake_judge
    judge = production_judge(server.url)
    headers = {"x-ratelimit-limit-requests": "1200", "x-ratelimit-remaining-requests": "1100",
               "x-ratelimit-reset-requests": "5s", "x-ratelimit-limit-tokens": "200000",
               "x-ratelimit-remaining-tokens": "150000", "x-ratelimit-reset-tokens": "15s"}
    calls.account_headers = headers
    try:
        result = await asyncio.wait_for(judge.judge(request_for("an answer")), 10)
    finally:
        await judge.close()
    assert isinstance(result, Answered)
    assert judge.pacer.rate == pytest.approx(1200 / 60), "one replica may use all of it"
    assert metric("groundedness_judge_account_remaining", budget="requests") == 1100
    assert metric("groundedness_judge_account_remaining", budget="tokens") == 150_000
    assert metric("groundedness_judge_pace_requests_per_minute") == pytest.approx(1200)
