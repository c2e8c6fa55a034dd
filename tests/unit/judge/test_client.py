"""OpenAIJudge over the real AsyncOpenAI client and a mock HTTP transport (no network)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from openai import AsyncOpenAI

from consumer.errors import JudgeUnavailable
from consumer.judge.attempts import Retries
from consumer.judge.client import OpenAIJudge
from consumer.judge.prompt import Limits, build_request
from consumer.judge.ratelimit import JudgeLimiter
from consumer.judge.result import Answered, TraceFailed
from schemas.trace import TraceEvent

Handler = Callable[[dict[str, Any]], httpx2.Response]


def answer(score: int = 5, content: str | None = None, refusal: str | None = None) -> (
    httpx2.Response
):
    text = content if content is not None or refusal else json.dumps(
        {"score": score, "reason": "checked", "unsupported_claims": []})
    return httpx2.Response(200, json={
        "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": text, "refusal": refusal}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    })


def error(status: int, message: str = "boom", code: str | None = None,
          param: str | None = None, headers: dict[str, str] | None = None) -> httpx2.Response:
    body = {"error": {"message": message, "type": "x", "code": code, "param": param}}
    return httpx2.Response(status, json=body, headers=headers)


class Recorder:
    """Answers with a handler and records each request body."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.bodies: list[dict[str, Any]] = []
        self.times: list[float] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        self.times.append(time.monotonic())
        return self.handler(body)

    @property
    def trace_calls(self) -> list[dict[str, Any]]:
        return [b for b in self.bodies if b["messages"][-1]["content"].startswith("Judge")]


def make_judge(recorder: Recorder, **options: Any) -> OpenAIJudge:
    client = AsyncOpenAI(
        api_key="sk-test", base_url="http://judge.test/v1", max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(recorder)),
    )
    defaults: dict[str, Any] = {"timeout_s": 5.0, "max_concurrency": 4,
                                "retries": Retries(backoff_s=0.01), "probe_delay_s": 0.05}
    return OpenAIJudge(client, "judge-model", limiter=JudgeLimiter(None, None),
                       **(defaults | options))


REQUEST = build_request(
    TraceEvent(trace_id="t", output="Paris is the capital.", retrieved_documents=["Paris."]),
    Limits(),
)


async def test_a_valid_answer_is_returned_with_usage() -> None:
    recorder = Recorder(lambda body: answer(4))
    result = await make_judge(recorder).judge(REQUEST)
    assert isinstance(result, Answered)
    assert result.answer.score == 4
    assert result.usage is not None
    assert result.usage.total_tokens == 120
    assert result.attempts == 1
    assert recorder.bodies[0]["response_format"]["type"] == "json_schema"
    assert recorder.bodies[0]["model"] == "judge-model"


async def test_structured_output_falls_back_when_rejected() -> None:
    def handler(body: dict[str, Any]) -> httpx2.Response:
        kind = body.get("response_format", {}).get("type")
        if kind in ("json_schema", "json_object"):
            return error(400, f"'response_format' of type '{kind}' is not supported",
                         param="response_format")
        return answer(3)

    recorder = Recorder(handler)
    judge = make_judge(recorder)
    first = await judge.judge(REQUEST)
    second = await judge.judge(REQUEST)
    assert isinstance(first, Answered)
    assert isinstance(second, Answered)
    kinds = [b.get("response_format", {}).get("type") for b in recorder.bodies]
    assert kinds == ["json_schema", "json_object", None, None]


async def test_garbage_is_retried_once_then_becomes_an_error() -> None:
    recorder = Recorder(lambda body: answer(content="not json at all"))
    result = await make_judge(recorder).judge(REQUEST)
    assert isinstance(result, TraceFailed)
    assert result.kind == "unparseable_answer"
    assert len(recorder.trace_calls) == 2


async def test_garbage_then_valid_answer_passes() -> None:
    replies = iter([answer(content="{oops"), answer(5)])
    result = await make_judge(Recorder(lambda body: next(replies))).judge(REQUEST)
    assert isinstance(result, Answered)
    assert result.attempts == 2


@pytest.mark.parametrize(
    ("response", "kind"),
    [
        pytest.param(answer(refusal="I can't help with that."), "refused", id="refusal"),
        pytest.param(error(400, "This model's maximum context length is 128000 tokens",
                           code="context_length_exceeded"), "context_too_long", id="context"),
    ],
)
async def test_per_trace_refusals_are_errors_without_retry(
    response: httpx2.Response, kind: str
) -> None:
    recorder = Recorder(lambda body: response)
    result = await make_judge(recorder).judge(REQUEST)
    assert isinstance(result, TraceFailed)
    assert result.kind == kind
    assert len(recorder.trace_calls) == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_a_4xx_for_one_trace_while_the_judge_answers_others_is_its_error(
    status: int,
) -> None:
    def handler(body: dict[str, Any]) -> httpx2.Response:
        if "Paris" in body["messages"][-1]["content"]:
            return error(status, "refused", code="invalid_value")
        return answer(5)  # the probe

    recorder = Recorder(handler)
    judge = make_judge(recorder)
    result = await judge.judge(REQUEST)
    assert isinstance(result, TraceFailed)
    assert (result.kind, result.message) == (
        f"judge_http_{status}", f"Error code: {status} - refused")
    assert not judge.breaker.is_open
    assert len(recorder.trace_calls) == 2  # once more after the probe answered


async def test_a_bad_value_of_a_parameter_is_not_reworded_but_held() -> None:
    """"Too large" names ``max_tokens`` too, but as a value: every call fails on it, so the
    judge holds (one trace call, one probe), rather than rewording or failing traces."""
    too_large = error(400, "max_tokens is too large: 5000. This model supports at most 4096 "
                      "completion tokens, whereas you provided 5000.", code="invalid_value",
                      param="max_tokens")
    recorder = Recorder(lambda body: too_large)
    judge = make_judge(recorder)
    with pytest.raises(JudgeUnavailable):
        await judge.judge(REQUEST)
    assert judge.breaker.is_open
    assert len(recorder.bodies) == 2
    assert all("max_tokens" in body for body in recorder.bodies)
    await judge.close()


async def test_the_limiter_is_settled_with_the_usage_reported() -> None:
    limiter = JudgeLimiter(None, 100_000)
    client = AsyncOpenAI(
        api_key="sk-test", base_url="http://judge.test/v1", max_retries=0,
        http_client=httpx2.AsyncClient(
            transport=httpx2.MockTransport(Recorder(lambda body: answer(5)))),
    )
    judge = OpenAIJudge(client, "judge-model", timeout_s=5, max_concurrency=4, limiter=limiter)
    assert REQUEST.estimated_tokens > 120
    await judge.judge(REQUEST)
    assert limiter.tokens_in_window() == 120  # the usage the judge reported, not the estimate


async def test_retry_after_is_honoured() -> None:
    replies = iter([error(429, "slow down", headers={"retry-after": "0.3"}), answer(5)])
    recorder = Recorder(lambda body: next(replies))
    result = await make_judge(recorder).judge(REQUEST)
    assert isinstance(result, Answered)
    assert recorder.times[1] - recorder.times[0] >= 0.29


async def test_failing_trace_while_judge_answers_others_becomes_error() -> None:
    def handler(body: dict[str, Any]) -> httpx2.Response:
        if "poison" in body["messages"][-1]["content"]:
            return error(500)
        return answer(5)

    recorder = Recorder(handler)
    judge = make_judge(recorder, retries=Retries(max_attempts=3, backoff_s=0.01))
    poison = build_request(TraceEvent(trace_id="p", output="poison"), Limits())
    result = await judge.judge(poison)
    assert isinstance(result, TraceFailed)
    assert result.kind == "judge_http_500"
    assert not judge.breaker.is_open
    # Three tries, then one more once the judge was seen answering others.
    assert len([b for b in recorder.trace_calls if "poison" in json.dumps(b)]) == 4


async def test_outage_raises_unavailable_and_opens_the_circuit() -> None:
    healthy = False

    def handler(body: dict[str, Any]) -> httpx2.Response:
        return answer(5) if healthy else error(503, "overloaded")

    judge = make_judge(Recorder(handler), retries=Retries(max_attempts=2, backoff_s=0.01))
    with pytest.raises(JudgeUnavailable):
        await judge.judge(REQUEST)
    assert judge.breaker.is_open
    healthy = True
    result = await asyncio.wait_for(judge.judge(REQUEST), timeout=5)
    assert isinstance(result, Answered)
    assert not judge.breaker.is_open
    await judge.close()


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_auth_and_model_errors_are_outages(status: int) -> None:
    judge = make_judge(Recorder(lambda body: error(status)))
    with pytest.raises(JudgeUnavailable):
        await judge.judge(REQUEST)
    assert judge.breaker.is_open
    await judge.close()


async def test_concurrency_is_bounded() -> None:
    in_flight = peak = 0

    async def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.02)
        in_flight -= 1
        return answer(5)

    client = AsyncOpenAI(api_key="k", base_url="http://judge.test/v1", max_retries=0,
                         http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)))
    judge = OpenAIJudge(client, "m", timeout_s=5, max_concurrency=3,
                        limiter=JudgeLimiter(None, None))
    results = await asyncio.gather(*(judge.judge(REQUEST) for _ in range(12)))
    assert all(isinstance(r, Answered) for r in results)
    assert peak == 3


async def test_rate_limits_never_become_error_verdicts() -> None:
    """A trace unlucky enough to meet a 429 on every try goes round again, then passes."""
    replies = iter([error(429, "slow down", headers={"retry-after": "0.01"})] * 6)

    def handler(body: dict[str, Any]) -> httpx2.Response:
        if "Paris" not in body["messages"][-1]["content"]:
            return answer(5)  # the probe: the judge answers others
        return next(replies, answer(4))

    recorder = Recorder(handler)
    judge = make_judge(recorder, retries=Retries(max_attempts=3, backoff_s=0.01))
    result = await judge.judge(REQUEST)
    assert isinstance(result, Answered)
    assert result.answer.score == 4
    assert len(recorder.trace_calls) == 7
