"""One trace's attempts: the end a timeout comes to, and the backoff between tries.

A timeout is decided at once (``HOLD_OR_ERROR``): while the judge answers others it is the
trace's ``judge_timeout`` error after one call (a second hang would hold a slot for another
full timeout); when the probe times out too, it is an outage.
"""

from __future__ import annotations

import asyncio

import pytest

from consumer.errors import JudgeUnavailable
from consumer.judge.attempts import Retries
from consumer.judge.client import OpenAIJudge, build_judge
from consumer.judge.prompt import JudgeRequest, Limits, build_request
from consumer.judge.result import TraceFailed
from consumer.localjudge.server import JudgeServer
from schemas.trace import TraceEvent
from tests.support.fake_judge import ScriptedJudge

FakeJudge = tuple[ScriptedJudge, JudgeServer]
TIMEOUT_S = 0.3


def quick_judge(url: str) -> OpenAIJudge:
    return build_judge("test-key", url, "gpt-4o-mini", timeout_s=TIMEOUT_S, max_concurrency=4,
                       requests_per_minute=None, tokens_per_minute=None)


def request_for(answer: str) -> JudgeRequest:
    trace = TraceEvent(trace_id="t", output=answer, retrieved_documents=["The sky is blue."])
    return build_request(trace, Limits())


async def test_a_timeout_while_the_judge_answers_others_is_the_traces_error_at_once(
    fake_judge: FakeJudge,
) -> None:
    calls, server = fake_judge
    judge = quick_judge(server.url)
    try:
        result = await asyncio.wait_for(judge.judge(request_for("[[hang]]")), timeout=10)
    finally:
        await judge.close()
    assert isinstance(result, TraceFailed)
    assert (result.kind, result.message) == ("judge_timeout", "the judge did not answer in time")
    assert result.attempts == 1
    assert [c.answer for c in calls.calls] == ["[[hang]]", "probe"]  # no second try
    assert judge.breaker.trips == 0


async def test_a_timeout_of_every_call_probes_included_is_an_outage(
    fake_judge: FakeJudge,
) -> None:
    calls, server = fake_judge
    calls.latency_s = 10 * TIMEOUT_S
    judge = quick_judge(server.url)
    try:
        with pytest.raises(JudgeUnavailable) as caught:
            await asyncio.wait_for(judge.judge(request_for("an answer")), timeout=10)
        held = judge.holding
    finally:
        await judge.close()
    assert caught.value.kind == "judge_timeout"
    assert held
    assert [c.answer for c in calls.calls] == ["an answer", "probe"]


@pytest.mark.parametrize(("failures", "ceiling_s"), [(1, 0.5), (2, 1.0), (3, 2.0), (9, 20.0)])
def test_backoff_doubles_with_jitter_up_to_its_ceiling(failures: int, ceiling_s: float) -> None:
    delays = [Retries().delay_s(failures, None) for _ in range(200)]
    assert all(ceiling_s / 2 <= delay <= ceiling_s for delay in delays)
    assert len(set(delays)) > 1  # jittered: concurrent retries do not arrive together


def test_retry_after_replaces_the_backoff() -> None:
    assert Retries().delay_s(1, 7.5) == 7.5
    assert Retries(max_backoff_s=1.0).delay_s(9, 30.0) == 30.0  # the endpoint's wait, as sent


async def test_the_prompt_tokens_the_providers_cache_served_are_read_from_the_response(
    fake_judge: FakeJudge,
) -> None:
    """``usage.prompt_tokens_details.cached_tokens`` through the real client: on the result's
    usage, which prices them at JUDGE_PRICE_CACHED_INPUT_PER_MILLION."""
    _, server = fake_judge
    judge = quick_judge(server.url)
    try:
        cached = await judge.judge(request_for("Blue. [[cached=64]]"))
        plain = await judge.judge(request_for("Blue."))
    finally:
        await judge.close()
    assert cached.usage is not None
    assert plain.usage is not None
    assert (cached.usage.cached_tokens, plain.usage.cached_tokens) == (64, 0)
    assert cached.usage.prompt_tokens > 64
