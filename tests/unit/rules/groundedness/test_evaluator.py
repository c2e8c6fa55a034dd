"""One trace -> one verdict: each judge result becomes its verdict, an outage is held through,
and (through the real ``AsyncOpenAI`` client over a mock transport) a judge endpoint that
echoes the request's credentials never gets them into a verdict."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import httpx2
import pytest
from openai import AsyncOpenAI

from consumer.cost.judge_cache import JudgeCache
from consumer.cost.pricing import Prices
from consumer.errors import JudgeUnavailable
from consumer.judge.attempts import Retries
from consumer.judge.client import OpenAIJudge
from consumer.judge.prompt import JudgeRequest, Limits, read_data
from consumer.judge.ratelimit import JudgeLimiter
from consumer.judge.result import Answered, JudgeResult, TraceFailed
from consumer.rules.groundedness.evaluator import Evaluator
from consumer.settings import load_settings
from consumer.telemetry.origin import TraceOrigin
from consumer.wiring import make_evaluator
from schemas.judge import JudgeAnswer
from schemas.trace import TraceEvent
from schemas.verdict import Source, Usage

API_KEY = "sk-proj-EchoedBackKey0123456789abcdefXYZ"
SASL_PASSWORD = "kafka-sasl-password-0123456789"
TRACE = TraceEvent(trace_id="t-echo", output="Paris is the capital.",
                   retrieved_documents=["Paris."])
SOURCE = Source(topic="llm-traces", partition=0, offset=7)
Handler = Callable[[httpx2.Request], httpx2.Response]
USAGE = Usage(prompt_tokens=10, completion_tokens=5, total_tokens=15)


class ScriptedResults:
    """A ``Judge`` that returns (or raises) what it is given, in order."""

    model = "scripted"
    holding = False

    def __init__(self, *outcomes: JudgeResult | JudgeUnavailable) -> None:
        self._outcomes: Iterator[JudgeResult | JudgeUnavailable] = iter(outcomes)
        self.calls = 0

    async def judge(self, request: JudgeRequest) -> JudgeResult:
        self.calls += 1
        outcome = next(self._outcomes)
        if isinstance(outcome, JudgeUnavailable):
            raise outcome
        return outcome

    async def close(self) -> None:
        return None


@pytest.mark.parametrize(
    ("result", "verdict", "error"),
    [
        pytest.param(Answered(JudgeAnswer(score=4, reason="ok"), USAGE, 42, 2), "pass", None,
                     id="answered"),
        pytest.param(TraceFailed("judge_http_403", "refused", USAGE, 42, 2), "error",
                     ("judge_http_403", "refused"), id="trace-failed"),
    ],
)
async def test_each_judge_result_becomes_its_verdict(
    result: JudgeResult, verdict: str, error: tuple[str, str] | None
) -> None:
    judge = ScriptedResults(result)
    evaluation = await Evaluator(judge, 0.5, Limits()).evaluate(TRACE, SOURCE)
    made = evaluation.verdict
    assert evaluation.result is result
    assert made.verdict == verdict
    found = (made.error.type, made.error.message) if made.error is not None else None
    assert found == error
    assert (made.usage, made.latency_ms, made.source) == (USAGE, 42, SOURCE)


async def test_a_trace_from_spans_gets_its_origin_on_the_verdict() -> None:
    origin = TraceOrigin(span_id="00f067aa0ba902b7", project_id="rag-app", session_id=None,
                         context_source="llm_input", spans=3, root_seen=False,
                         closed_by="max_wait")
    judge = ScriptedResults(Answered(JudgeAnswer(score=4, reason="ok"), USAGE, 1, 1),
                            Answered(JudgeAnswer(score=4, reason="ok"), USAGE, 1, 1))
    evaluator = Evaluator(judge, 0.5, Limits())
    spans = (await evaluator.evaluate(TRACE, SOURCE, origin)).verdict
    assert (spans.span_id, spans.project_id, spans.session_id) == (
        "00f067aa0ba902b7", "rag-app", None)
    assert spans.context_source == "llm_input"
    assert spans.assembly is not None
    assert (spans.assembly.spans, spans.assembly.root_seen, spans.assembly.closed_by) == (
        3, False, "max_wait")
    plain = json.loads((await evaluator.evaluate(TRACE, SOURCE)).verdict.model_dump_json())
    assert {"span_id", "project_id", "context_source", "assembly"}.isdisjoint(plain)


async def test_an_outage_is_held_through_never_a_verdict() -> None:
    judge = ScriptedResults(JudgeUnavailable("judge_http_503", "down"),
                            JudgeUnavailable("judge_unavailable", "holding"),
                            Answered(JudgeAnswer(score=5, reason="ok"), USAGE, 1, 1))
    evaluation = await Evaluator(judge, 0.5, Limits()).evaluate(TRACE, SOURCE)
    assert evaluation.verdict.verdict == "pass"
    assert judge.calls == 3


def completion(content: str) -> httpx2.Response:
    return httpx2.Response(200, json={
        "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    })


def is_probe(request: httpx2.Request) -> bool:
    """A health probe (no trace data): the endpoint answers those, so it is up for others."""
    try:
        read_data(json.loads(request.content)["messages"])
    except ValueError:
        return True
    return False


def echo_error(padding: int) -> Handler:
    """A 400 for the trace whose body quotes the Authorization header, after ``padding``
    characters; probes are answered."""
    def handler(request: httpx2.Request) -> httpx2.Response:
        if is_probe(request):
            return completion('{"ok": true}')
        echoed = "x" * padding + request.headers["authorization"]
        return httpx2.Response(400, json={"error": {"message": f"Bad header {echoed}",
                                                    "type": "invalid_request_error"}})
    return handler


def echo_in_answer(request: httpx2.Request) -> httpx2.Response:
    """A valid answer whose reason and claims quote the credentials."""
    auth = request.headers["authorization"]
    return completion(json.dumps({"score": 2, "reason": f"Request had {auth}.",
                                  "unsupported_claims": [auth, f"pw {SASL_PASSWORD}"]}))


def echo_judge(handler: Handler) -> OpenAIJudge:
    client = AsyncOpenAI(
        api_key=API_KEY, base_url="http://judge.test/v1", max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )
    return OpenAIJudge(client, "judge-model", timeout_s=5.0, max_concurrency=2,
                       limiter=JudgeLimiter(None, None), retries=Retries(backoff_s=0.01),
                       probe_delay_s=0.05)


def assert_no_secret(published: str) -> None:
    for secret in (API_KEY, SASL_PASSWORD):
        assert secret[:8] not in published, published


@pytest.mark.parametrize(
    "padding",
    [pytest.param(0, id="whole-key"),
     # The judge cuts error messages to 300 characters: this puts the cut inside the key.
     pytest.param(250, id="key-cut-by-the-message-limit")],
)
async def test_an_echoed_key_in_an_error_never_reaches_the_verdict(padding: int) -> None:
    judge = echo_judge(echo_error(padding))
    evaluator = Evaluator(judge, 0.5, Limits(), secrets=[API_KEY])
    try:
        evaluation = await evaluator.evaluate(TRACE, SOURCE)
    finally:
        await judge.close()
    verdict = evaluation.verdict
    assert verdict.verdict == "error"
    assert verdict.error is not None
    assert verdict.error.type == "judge_http_400"
    assert "[REDACTED]" in verdict.error.message
    assert isinstance(evaluation.result, TraceFailed)
    assert API_KEY[:8] in evaluation.result.message, "the endpoint did echo it"
    assert_no_secret(verdict.model_dump_json())  # what the sink publishes


async def test_the_worker_wires_every_known_secret_into_its_verdicts() -> None:
    """``make_evaluator`` (used by run, replay, check and eval) redacts the settings' secrets."""
    settings = load_settings(openai_api_key=API_KEY, kafka_sasl_password=SASL_PASSWORD,
                             min_acceptable_score=0.5)
    judge = echo_judge(echo_in_answer)
    evaluator = make_evaluator(settings, judge)
    try:
        evaluation = await evaluator.evaluate(TRACE, SOURCE)
    finally:
        await judge.close()
    verdict = evaluation.verdict
    assert verdict.verdict == "fail"
    assert verdict.reason == "Request had Bearer [REDACTED]."
    assert verdict.unsupported_claims == ["Bearer [REDACTED]", "pw [REDACTED]"]
    assert_no_secret(verdict.model_dump_json())


async def test_an_identical_request_reuses_the_answer_and_spends_nothing() -> None:
    judge = ScriptedResults(Answered(JudgeAnswer(score=4, reason="ok"), USAGE, 42, 1))
    evaluator = Evaluator(judge, 0.5, Limits(), cache=JudgeCache(10),
                          prices=Prices(input_per_million=0.15, output_per_million=0.6))
    first = await evaluator.evaluate(TRACE, SOURCE)
    again_trace = TRACE.model_copy(update={"trace_id": "t-other"})  # same text, other trace
    second = await evaluator.evaluate(again_trace, SOURCE)
    assert judge.calls == 1
    assert (first.verdict.cached, second.verdict.cached) == (False, True)
    assert first.verdict.cost_usd == pytest.approx((10 * 0.15 + 5 * 0.6) / 1e6)
    assert second.verdict.cost_usd == 0.0
    assert second.verdict.verdict_id != first.verdict.verdict_id, "its own id"
    assert (second.verdict.verdict, second.verdict.score) == (first.verdict.verdict,
                                                              first.verdict.score)
    assert '"cached":true' in second.verdict.model_dump_json()
    assert "cached" not in first.verdict.model_dump_json(), "left out unless cached"


async def test_an_error_is_never_reused() -> None:
    judge = ScriptedResults(TraceFailed("timeout", "slow", USAGE, 30_000, 3),
                            Answered(JudgeAnswer(score=5, reason="ok"), USAGE, 42, 1))
    evaluator = Evaluator(judge, 0.5, Limits(), cache=JudgeCache(10))
    assert (await evaluator.evaluate(TRACE)).verdict.verdict == "error"
    retried = await evaluator.evaluate(TRACE)
    assert (retried.verdict.verdict, retried.verdict.cached) == ("pass", False)
    assert judge.calls == 2


async def test_without_prices_a_verdict_has_no_cost() -> None:
    judge = ScriptedResults(Answered(JudgeAnswer(score=4, reason="ok"), USAGE, 42, 1))
    verdict = (await Evaluator(judge, 0.5, Limits()).evaluate(TRACE)).verdict
    assert verdict.cost_usd is None
    assert "cost_usd" not in verdict.model_dump_json()
