"""How the production judge sorts failures, against the fake judge over real HTTP.

One question decides between a trace's ``error`` verdict and an outage: does the judge answer
others? A refusal of one trace while others are answered is that trace's error; a failure of
every call, probes included, holds the circuit open. Rejections of a part of the request
(structured output, ``max_tokens``, ``temperature``) are neither: the request is reworded and
sent again. Each test drives ``build_judge`` (the real ``AsyncOpenAI`` on its aiohttp
transport) against ``ScriptedJudge``, which answers with OpenAI's own error bodies.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog

from consumer.errors import JudgeUnavailable
from consumer.judge import JudgeResult, OpenAIJudge, build_judge
from consumer.judge_server import JudgeServer, error_reply
from consumer.metrics import REGISTRY
from consumer.prompt import JudgeRequest, Limits, build_request
from schemas.trace import TraceEvent
from tests.fakes.judge import ScriptedJudge

FakeJudge = tuple[ScriptedJudge, JudgeServer]
# o1-mini's answer to a system message: a parameter every call fails on, and none we reword.
SYSTEM_ROLE_REFUSED = error_reply(
    400, "Unsupported value: 'messages[0].role' does not support 'system' with this model.",
    code="unsupported_value", param="messages[0].role",
)


def production_judge(url: str, model: str = "gpt-4o-mini", **limits: Any) -> OpenAIJudge:
    options: dict[str, Any] = {"requests_per_minute": None, "tokens_per_minute": None} | limits
    return build_judge("test-key", url, model, timeout_s=5.0, max_concurrency=16, **options)


def request_for(answer: str) -> JudgeRequest:
    trace = TraceEvent(trace_id="t", output=answer, retrieved_documents=["The sky is blue."])
    return build_request(trace, Limits())


async def judge_all(judge: OpenAIJudge, answers: list[str]) -> list[JudgeResult]:
    """Every answer judged concurrently; the judge closed afterwards."""
    try:
        calls = asyncio.gather(*(judge.judge(request_for(answer)) for answer in answers))
        return await asyncio.wait_for(calls, timeout=30)
    finally:
        await judge.close()


def circuit_gauge() -> float | None:
    return REGISTRY.get_sample_value("groundedness_circuit_open")


def without_messages(body: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in body.items() if key != "messages"}


# -- item 5: a refusal of one trace is that trace's error --------------------------------------


async def test_a_403_for_one_trace_among_normal_ones_is_its_error_and_trips_nothing(
    fake_judge: FakeJudge,
) -> None:
    calls, server = fake_judge
    calls.latency_s = 0.02
    judge = production_judge(server.url)
    answers = [f"answer {i}" for i in range(24)]
    answers[5] = "refused by the gateway [[status=403]]"
    results = await judge_all(judge, answers)
    refused = results.pop(5)
    assert refused.error is not None
    assert (refused.error.kind, refused.error.message) == (
        "judge_http_403", "Error code: 403 - Country, region, or territory not supported")
    assert all(result.answer is not None for result in results)
    assert judge.breaker.trips == 0


async def test_a_403_with_nothing_else_in_flight_is_decided_by_probes(
    fake_judge: FakeJudge,
) -> None:
    calls, server = fake_judge
    judge = production_judge(server.url)
    [result] = await judge_all(judge, ["[[status=403]]"])
    assert result.error is not None
    assert result.error.kind == "judge_http_403"
    assert judge.breaker.trips == 0
    # Refused; a probe answered; one more try (an outage may just have ended); refused
    # again, and a probe sent after that answered too (the judge had not just gone down).
    assert [(c.answer, c.status) for c in calls.calls] == [
        ("[[status=403]]", 403), ("probe", 200), ("[[status=403]]", 403), ("probe", 200)]


async def test_a_bad_key_holds_and_never_becomes_an_error(fake_judge: FakeJudge) -> None:
    calls, server = fake_judge
    calls.outage = 401
    judge = production_judge(server.url)
    try:
        with pytest.raises(JudgeUnavailable):
            await judge.judge(request_for("an answer"))
        held = judge.holding, circuit_gauge()
        calls.outage = None
        result = await asyncio.wait_for(judge.judge(request_for("an answer")), timeout=10)
    finally:
        await judge.close()
    assert held == (True, 1.0)
    assert result.answer is not None
    assert (judge.holding, circuit_gauge()) == (False, 0.0)


# -- item 6: a 4xx that fails every call holds; reasoning models are asked as they expect ----


@pytest.mark.usefixtures("default_structlog")
async def test_a_400_for_every_call_holds_and_says_why_in_one_line(fake_judge: FakeJudge) -> None:
    calls, server = fake_judge
    calls.outage = SYSTEM_ROLE_REFUSED
    judge = production_judge(server.url)
    try:
        with structlog.testing.capture_logs() as logs:
            with pytest.raises(JudgeUnavailable):
                await judge.judge(request_for("an answer"))
            held = judge.holding, circuit_gauge()
        calls.outage = None
        result = await asyncio.wait_for(judge.judge(request_for("an answer")), timeout=10)
    finally:
        await judge.close()
    assert held == (True, 1.0)
    [opened] = [entry for entry in logs if entry["event"] == "judge_circuit_open"]
    assert (opened["status"], opened["param"]) == (400, "messages[0].role")
    assert "does not support 'system'" in opened["message"]
    # The probe that found the judge failing for everyone was worded as the trace's call.
    trace_call = calls.calls_for("an answer")[0].request
    probe = calls.calls_for("probe")[0].request
    assert without_messages(probe) == without_messages(trace_call)
    assert result.answer is not None


@pytest.mark.parametrize("model", ["o1", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini", "gpt-5.1"])
async def test_a_reasoning_model_is_asked_as_it_expects_from_the_first_call(
    fake_judge: FakeJudge, model: str
) -> None:
    calls, server = fake_judge
    calls.refused_params = frozenset({"max_tokens", "temperature"})
    results = await judge_all(production_judge(server.url, model), [f"a {i}" for i in range(6)])
    assert all(result.answer is not None for result in results)
    assert {c.status for c in calls.calls} == {200}
    for call in calls.calls:
        assert "max_completion_tokens" in call.request
        assert not {"max_tokens", "temperature"} & call.request.keys()


async def test_a_model_that_refuses_max_tokens_and_temperature_is_adapted_to(
    fake_judge: FakeJudge,
) -> None:
    """An Azure deployment name says nothing of the model behind it: its first refusals say."""
    calls, server = fake_judge
    calls.refused_params = frozenset({"max_tokens", "temperature"})
    calls.latency_s = 0.05
    judge = production_judge(server.url, "judge-deployment")
    first = await asyncio.gather(*(judge.judge(request_for(f"a {i}")) for i in range(8)))
    calls.reset()
    later = await judge_all(judge, [f"b {i}" for i in range(4)])
    assert all(result.answer is not None for result in first + later)
    assert judge.breaker.trips == 0
    assert {c.status for c in calls.calls} == {200}  # once adapted, asked right first time
    assert all("max_completion_tokens" in c.request and "temperature" not in c.request
               for c in calls.calls)


async def test_an_endpoint_without_max_completion_tokens_gets_max_tokens(
    fake_judge: FakeJudge,
) -> None:
    calls, server = fake_judge
    calls.refused_params = frozenset({"max_completion_tokens"})
    [result] = await judge_all(production_judge(server.url, "o3-mini"), ["an answer"])
    assert result.answer is not None
    assert [c.status for c in calls.calls] == [400, 200]
    assert "max_tokens" in calls.calls[-1].request


# -- item 7: a refused response format is never a trace's error ------------------------------


@pytest.mark.parametrize(
    ("refused", "answered_with"),
    [({"json_schema"}, "json_object"), ({"json_schema", "json_object"}, None)],
    ids=["no-json-schema", "no-structured-output"],
)
async def test_concurrent_calls_to_an_endpoint_without_json_schema_never_error(
    fake_judge: FakeJudge, refused: set[str], answered_with: str | None
) -> None:
    calls, server = fake_judge
    calls.rejected_formats = frozenset(refused)
    calls.latency_s = 0.1  # all twelve in flight together
    results = await judge_all(production_judge(server.url), [f"a {i}" for i in range(12)])
    assert [result.error for result in results] == [None] * 12
    assert {c.response_format for c in calls.calls if c.status == 200} == {answered_with}


# -- item 8: a request that can never fit is its trace's error, at once ----------------------


async def test_a_request_too_large_429_is_the_traces_error_at_once(fake_judge: FakeJudge) -> None:
    calls, server = fake_judge
    judge = production_judge(server.url)
    [result] = await judge_all(judge, ["[[too_large]]"])
    assert result.error is not None
    assert result.error.kind == "request_too_large"
    assert "Request too large for gpt-4o-mini" in result.error.message
    assert len(calls.calls_for("too_large")) == 1
    assert judge.breaker.trips == 0


async def test_a_request_above_tokens_per_minute_is_an_error_without_a_call(
    fake_judge: FakeJudge,
) -> None:
    calls, server = fake_judge
    judge = production_judge(server.url, tokens_per_minute=1_000)
    big, small = await judge_all(judge, ["long " * 800, "The sky is blue."])
    assert big.error is not None
    assert big.error.kind == "request_too_large"
    assert "JUDGE_TOKENS_PER_MINUTE" in big.error.message
    assert small.answer is not None
    assert calls.count("long") == 0
