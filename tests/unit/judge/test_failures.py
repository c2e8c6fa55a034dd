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

import httpx2
import openai
import pytest
import structlog

from consumer.errors import JudgeUnavailable
from consumer.judge.attempts import MAX_RATE_LIMITED_ROUNDS
from consumer.judge.client import OpenAIJudge, build_judge
from consumer.judge.failures import Action, classify
from consumer.judge.prompt import MAX_ANSWER_TOKENS, JudgeRequest, Limits, build_request
from consumer.judge.request_shape import REASONING_ANSWER_TOKENS
from consumer.judge.result import Answered, JudgeResult, TraceFailed
from consumer.localjudge.replies import error_reply
from consumer.localjudge.server import JudgeServer
from consumer.ops.metrics import REGISTRY
from schemas.trace import TraceEvent
from tests.support.fake_judge import ScriptedJudge

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
    assert isinstance(refused, TraceFailed)
    assert (refused.kind, refused.message) == (
        "judge_http_403", "Error code: 403 - Country, region, or territory not supported")
    assert all(isinstance(result, Answered) for result in results)
    assert judge.breaker.trips == 0


async def test_a_403_with_nothing_else_in_flight_is_decided_by_probes(
    fake_judge: FakeJudge,
) -> None:
    calls, server = fake_judge
    judge = production_judge(server.url)
    [result] = await judge_all(judge, ["[[status=403]]"])
    assert isinstance(result, TraceFailed)
    assert result.kind == "judge_http_403"
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
    assert isinstance(result, Answered)
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
    assert isinstance(result, Answered)


@pytest.mark.parametrize("model", ["o1", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini", "gpt-5.1"])
async def test_a_reasoning_model_is_asked_as_it_expects_from_the_first_call(
    fake_judge: FakeJudge, model: str
) -> None:
    calls, server = fake_judge
    calls.refused_params = frozenset({"max_tokens", "temperature"})
    results = await judge_all(production_judge(server.url, model), [f"a {i}" for i in range(6)])
    assert all(isinstance(result, Answered) for result in results)
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
    assert all(isinstance(result, Answered) for result in first + later)
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
    assert isinstance(result, Answered)
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
    assert [result for result in results if isinstance(result, TraceFailed)] == []
    assert {c.response_format for c in calls.calls if c.status == 200} == {answered_with}


# -- item 8: a request that can never fit is its trace's error, at once ----------------------


async def test_a_request_too_large_429_is_the_traces_error_at_once(fake_judge: FakeJudge) -> None:
    calls, server = fake_judge
    judge = production_judge(server.url)
    [result] = await judge_all(judge, ["[[too_large]]"])
    assert isinstance(result, TraceFailed)
    assert result.kind == "request_too_large"
    assert "Request too large for gpt-4o-mini" in result.message
    assert len(calls.calls_for("too_large")) == 1
    assert judge.breaker.trips == 0


async def test_a_request_above_tokens_per_minute_is_an_error_without_a_call(
    fake_judge: FakeJudge,
) -> None:
    calls, server = fake_judge
    judge = production_judge(server.url, tokens_per_minute=1_000)
    big, small = await judge_all(judge, ["long " * 800, "The sky is blue."])
    assert isinstance(big, TraceFailed)
    assert big.kind == "request_too_large"
    assert "JUDGE_TOKENS_PER_MINUTE" in big.message
    assert isinstance(small, Answered)
    assert calls.count("long") == 0


# -- reasoning models the name table misses: the budget follows what the endpoint shows ------


async def test_a_deployment_that_wants_max_completion_tokens_gets_the_reasoning_budget(
    fake_judge: FakeJudge,
) -> None:
    """Refusing ``max_tokens`` for ``max_completion_tokens`` says a reasoning model: 400
    tokens would all go to its reasoning, and every answer would come back empty."""
    calls, server = fake_judge
    calls.refused_params = frozenset({"max_tokens", "temperature"})
    calls.reasoning_tokens = 1_000
    judge = production_judge(server.url, "judge-deployment")
    results = await judge_all(judge, [f"a {i}" for i in range(6)])
    assert [result for result in results if isinstance(result, TraceFailed)] == []
    assert {c.request["max_completion_tokens"] for c in calls.calls if c.status == 200} == {
        REASONING_ANSWER_TOKENS}


async def test_an_answer_cut_by_its_budget_is_asked_again_with_the_reasoning_budget(
    fake_judge: FakeJudge,
) -> None:
    """A reasoning model behind a name we do not know, on an endpoint that takes
    ``max_tokens``: its empty ``finish_reason: length`` answers are the budget's fault."""
    calls, server = fake_judge
    calls.reasoning_tokens = 1_000
    calls.latency_s = 0.05  # all six in flight on the first, too small, budget
    judge = production_judge(server.url, "judge-deployment")
    results = await judge_all(judge, [f"a {i}" for i in range(6)])
    assert [result for result in results if isinstance(result, TraceFailed)] == []
    for i in range(6):  # at most one cut answer per trace, then the larger budget
        budgets = [c.request["max_tokens"] for c in calls.calls_for(f"a {i}")]
        assert budgets[-1] == REASONING_ANSWER_TOKENS
        assert len(budgets) <= 2
    assert judge.breaker.trips == 0


async def test_an_answer_cut_at_the_largest_budget_is_the_traces_unparseable_answer(
    fake_judge: FakeJudge,
) -> None:
    calls, server = fake_judge
    calls.reasoning_tokens = 100_000
    judge = production_judge(server.url, "judge-deployment")
    [result] = await judge_all(judge, ["an answer"])
    assert isinstance(result, TraceFailed)
    assert result.kind == "unparseable_answer"
    assert "finish_reason" in result.message
    assert [c.request["max_tokens"] for c in calls.calls] == [
        MAX_ANSWER_TOKENS, REASONING_ANSWER_TOKENS]
    assert judge.breaker.trips == 0


# -- a 429 for one trace: never a loop, never a hold on everyone for ever --------------------


async def test_a_429_asking_more_than_the_whole_limit_is_the_traces_error_at_once(
    fake_judge: FakeJudge,
) -> None:
    calls, server = fake_judge
    judge = production_judge(server.url)
    [result] = await judge_all(judge, ["[[over_limit]]"])
    assert isinstance(result, TraceFailed)
    assert result.kind == "request_too_large"
    assert "Limit 30000, Used 1200, Requested 45000" in result.message
    assert calls.count("over_limit") == 1


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit "
         "30000, Used 29000, Requested 1500. Please try again in 2s.", "judge_rate_limited"),
        ("Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit "
         "30,000, Requested 45,000.", "request_too_large"),
        ("Rate limit reached for requests. Please try again.", "judge_rate_limited"),
    ],
    ids=["fits-later", "never-fits", "no-numbers"],
)
def test_a_429_is_too_large_only_when_it_asks_more_than_the_limit(
    message: str, kind: str
) -> None:
    response = httpx2.Response(429, request=httpx2.Request("POST", "http://judge/"))
    assert classify(openai.RateLimitError(message, response=response, body=None)).kind == kind


async def test_a_429_for_one_trace_only_ends_in_its_error_after_bounded_rounds(
    fake_judge: FakeJudge, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Invariant 10: the judge answers others, so this trace's 429s are not the account's.
    It goes round a bounded number of times, and only its first round holds everyone."""
    calls, server = fake_judge
    judge = production_judge(server.url)
    holds: list[float] = []
    hold = judge.limiter.hold

    def counted_hold(seconds: float) -> None:
        holds.append(seconds)
        hold(seconds)

    monkeypatch.setattr(judge.limiter, "hold", counted_hold)
    answers = ["[[status=429 retry_after=0.02]]"] + [f"a {i} [[delay=0.1]]" for i in range(6)]
    bad, *good = await judge_all(judge, answers)
    assert isinstance(bad, TraceFailed)
    assert bad.kind == "judge_rate_limited"
    assert calls.count("status=429") == MAX_RATE_LIMITED_ROUNDS * 4  # 4 attempts a round
    assert all(isinstance(result, Answered) for result in good)
    assert judge.breaker.trips == 0
    assert len(holds) == 4  # the first round's; later rounds wait on their own


# -- failed calls: the ledger keeps only what may have been spent ----------------------------


@pytest.mark.parametrize(
    ("failure", "kept"),
    [("[[fail=2 status=429 retry_after=0.01]]", False), ("[[fail=2 status=409]]", False),
     ("[[fail=2 status=503]]", True)],
    ids=["429", "4xx", "5xx"],
)
async def test_failed_calls_keep_their_tokens_only_when_they_may_have_been_spent(
    fake_judge: FakeJudge, failure: str, kept: bool
) -> None:
    calls, server = fake_judge
    judge = production_judge(server.url, tokens_per_minute=1_000_000)
    answers = [f"{failure} a {i}" for i in range(8)]
    try:
        results = await asyncio.wait_for(
            asyncio.gather(*(judge.judge(request_for(answer)) for answer in answers)), 30)
        counted = judge.limiter.tokens_in_window()
    finally:
        await judge.close()
    reported = sum(result.usage.total_tokens for result in results if result.usage)
    failed = [c for c in calls.calls if c.status != 200]
    assert len(failed) == 16
    estimates = sum(request_for(c.answer).estimated_tokens for c in failed)
    assert counted == reported + (estimates if kept else 0)


def test_a_refused_connection_consumed_nothing() -> None:
    request = httpx2.Request("POST", "http://judge/")
    assert classify(openai.APIConnectionError(request=request)).consumed_nothing
    assert not classify(openai.APITimeoutError(request=request)).consumed_nothing
    response = httpx2.Response(500, request=request)
    assert not classify(openai.InternalServerError("x", response=response, body=None)
                        ).consumed_nothing


# -- a 400 that merely mentions response_format rewords nothing ------------------------------


async def test_a_400_echoing_the_request_body_is_the_traces_error_not_a_rewording(
    fake_judge: FakeJudge,
) -> None:
    calls, server = fake_judge
    judge = production_judge(server.url)
    echoed, other = await judge_all(judge, ["[[echo_400]]", "[[delay=0.3]] fine"])
    assert isinstance(echoed, TraceFailed)
    assert echoed.kind == "judge_http_400"
    assert "response_format" in echoed.message
    assert isinstance(other, Answered)
    assert {c.response_format for c in calls.calls} == {"json_schema"}


@pytest.mark.parametrize(
    ("message", "param", "reworded"),
    [
        ("Invalid parameter: 'response_format' of type 'json_schema' is not supported with "
         "this model.", "response_format", True),
        ("Invalid parameter: 'response_format' of type 'json_schema' is not supported with "
         "this model.", None, True),
        ("response_format json_schema is not supported by this backend", None, True),
        ("Structured outputs are not supported for this model", None, True),
        ("Unsupported parameter: response_format", None, True),
        ("Invalid response format", None, True),
        ('Blocked by policy: {"model": "m", "response_format": {"type": "json_schema", '
         '"json_schema": {"name": "v", "strict": true}}}', None, False),
        ('Invalid request: {"response_format": {"type": "json_schema"}}', None, False),
        ("The prompt mentions response_format and was flagged", None, False),
    ],
)
def test_only_a_refusal_of_the_response_format_rewords_it(
    message: str, param: str | None, reworded: bool
) -> None:
    response = httpx2.Response(400, request=httpx2.Request("POST", "http://judge/"))
    exc = openai.BadRequestError(message, response=response, body={"param": param})
    exc.param = param
    failure = classify(exc)
    assert (failure.action is Action.RESHAPE) == reworded, failure
