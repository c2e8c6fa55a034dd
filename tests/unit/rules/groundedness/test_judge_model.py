"""A verdict names the model that answered (the response's ``model``), else the one asked for;
its id never depends on either."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from openai import AsyncOpenAI

from consumer.cost.judge_cache import JudgeCache
from consumer.judge.attempts import Retries
from consumer.judge.client import OpenAIJudge
from consumer.judge.prompt import Limits
from consumer.judge.ratelimit import JudgeLimiter
from consumer.rules.groundedness.evaluator import Evaluator
from consumer.rules.verdicts import verdict_id
from schemas.trace import TraceEvent

ASKED = "gpt-4o-mini"
SNAPSHOT = "gpt-4o-mini-2024-07-18"
TRACE = TraceEvent(trace_id="t-1", output="Paris is the capital.", retrieved_documents=["Paris."])
VALID = json.dumps({"score": 5, "reason": "supported", "unsupported_claims": []})


def completion(content: str, model: str) -> httpx2.Response:
    return httpx2.Response(200, json={
        "id": "c1", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": content, "refusal": None}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    })


def evaluator(handler: Any, cache_size: int = 0) -> Evaluator:
    client = AsyncOpenAI(
        api_key="sk-test", base_url="http://judge.test/v1", max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )
    judge = OpenAIJudge(client, ASKED, timeout_s=5.0, max_concurrency=2,
                        limiter=JudgeLimiter(None, None), retries=Retries(backoff_s=0.01),
                        probe_delay_s=0.05)
    return Evaluator(judge, 0.5, Limits(), cache=JudgeCache(cache_size))


@pytest.mark.parametrize(
    ("answered_as", "named"),
    [
        pytest.param(SNAPSHOT, SNAPSHOT, id="a-snapshot-of-the-alias"),
        pytest.param("groundedness-local-judge", "groundedness-local-judge", id="another-name"),
        pytest.param("", ASKED, id="no-name-falls-back-to-the-asked"),
    ],
)
async def test_a_verdict_names_the_model_that_answered(answered_as: str, named: str) -> None:
    evaluation = await evaluator(lambda request: completion(VALID, answered_as)).evaluate(TRACE)
    assert evaluation.verdict.verdict == "pass"
    assert evaluation.verdict.judge_model == named


async def test_an_error_verdict_names_the_model_whose_answer_was_unreadable() -> None:
    evaluation = await evaluator(lambda request: completion("not json", SNAPSHOT)).evaluate(TRACE)
    assert evaluation.verdict.verdict == "error"
    assert evaluation.verdict.judge_model == SNAPSHOT


async def test_an_error_before_any_answer_names_the_model_asked_for() -> None:
    body = {"error": {"message": "This model's maximum context length is 128000 tokens.",
                      "type": "invalid_request_error", "code": "context_length_exceeded",
                      "param": "messages"}}
    evaluation = await evaluator(lambda request: httpx2.Response(400, json=body)).evaluate(TRACE)
    assert evaluation.verdict.verdict == "error"
    assert evaluation.verdict.judge_model == ASKED


async def test_a_cached_answer_keeps_the_model_that_gave_it() -> None:
    judge = evaluator(lambda request: completion(VALID, SNAPSHOT), cache_size=8)
    first = await judge.evaluate(TRACE)
    again = await judge.evaluate(TRACE.model_copy(update={"trace_id": "t-2"}))
    assert again.verdict.cached is True
    assert (first.verdict.judge_model, again.verdict.judge_model) == (SNAPSHOT, SNAPSHOT)


async def test_the_verdict_id_does_not_depend_on_the_model_that_answered() -> None:
    ids = {(await evaluator(lambda request, m=model: completion(VALID, m)).evaluate(TRACE))
           .verdict.verdict_id for model in (ASKED, SNAPSHOT, "other")}
    assert ids == {verdict_id(TRACE.trace_id)}
