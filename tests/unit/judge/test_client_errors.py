"""The fake judge over real HTTP on loopback, through the real ``AsyncOpenAI`` client.

These tests also pin what the openai client does with each failure (``max_retries=0``), since
``consumer/judge/failures.py`` maps exactly these exceptions; each runs through both of the
SDK's HTTP transports: httpx (its default) and aiohttp (the one the worker uses).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any, cast

import openai
import pytest
import structlog
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from openai.types.chat.completion_create_params import ResponseFormat

from consumer.errors import JudgeError
from consumer.judge.client import OpenAIJudge, build_judge
from consumer.judge.failures import classify
from consumer.judge.prompt import (
    ANSWER_JSON_SCHEMA,
    PROBE_MESSAGES,
    Limits,
    build_request,
    parse_answer,
)
from consumer.judge.result import Answered
from consumer.localjudge.replies import Reply
from consumer.localjudge.server import JudgeServer
from schemas.trace import TraceEvent
from tests.support.fake_judge import JSON_SCHEMA_REJECTED, ScriptedJudge, markers
from tests.support.ports import free_port

FakeJudge = tuple[ScriptedJudge, JudgeServer]
JSON_SCHEMA: dict[str, Any] = {"type": "json_schema", "json_schema": ANSWER_JSON_SCHEMA}
JSON_OBJECT: dict[str, Any] = {"type": "json_object"}


def messages_for(answer: str) -> list[ChatCompletionMessageParam]:
    """The real ``groundedness@v1`` messages for one answer."""
    trace = TraceEvent.model_validate(
        {"trace_id": "t-1", "output": answer, "retrieved_documents": ["The sky is blue."]}
    )
    return cast("list[ChatCompletionMessageParam]", build_request(trace, Limits()).messages)


async def ask(
    client: openai.AsyncOpenAI, answer: str, response_format: dict[str, Any] | None = None
) -> ChatCompletion:
    """One judge call for ``answer`` (``answer == "probe"`` sends the health probe)."""
    messages = (
        cast("list[ChatCompletionMessageParam]", PROBE_MESSAGES)
        if answer == "probe"
        else messages_for(answer)
    )
    return await client.chat.completions.create(
        model="gpt-4o-mini",
        messages=messages,
        response_format=cast(ResponseFormat, response_format) if response_format else openai.omit,
    )


TRANSPORTS = ("httpx", "aiohttp")


def real_client(url: str, transport: str, **options: Any) -> openai.AsyncOpenAI:
    """The openai client over one of its HTTP transports."""
    if transport == "aiohttp":
        options["http_client"] = openai.DefaultAioHttpClient()
    return openai.AsyncOpenAI(base_url=url, api_key="test-key", **options)


@pytest.fixture(params=TRANSPORTS)
async def client(
    fake_judge: FakeJudge, request: pytest.FixtureRequest
) -> AsyncIterator[openai.AsyncOpenAI]:
    _, server = fake_judge
    async with real_client(server.url, request.param, max_retries=0, timeout=5.0) as client:
        yield client


async def test_real_client_gets_a_parsed_completion(
    fake_judge: FakeJudge, client: openai.AsyncOpenAI
) -> None:
    judge, _ = fake_judge
    completion = await ask(client, "The sky is blue. [[score=4]]", JSON_SCHEMA)
    answer = parse_answer(completion.choices[0].message.content)
    assert (answer.score, answer.unsupported_claims) == (4, [])
    assert completion.model == "gpt-4o-mini"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens > 100
    [call] = judge.calls
    assert (call.model, call.response_format, call.status) == ("gpt-4o-mini", "json_schema", 200)
    assert call.answer == "The sky is blue. [[score=4]]"


async def test_no_marker_scores_5_and_probe_answers_ok(
    fake_judge: FakeJudge, client: openai.AsyncOpenAI
) -> None:
    judge, _ = fake_judge
    verdict = await ask(client, "The sky is blue.")
    probe = await ask(client, "probe")
    assert parse_answer(verdict.choices[0].message.content).score == 5
    assert json.loads(probe.choices[0].message.content or "") == {"ok": True}
    assert [c.answer for c in judge.calls] == ["The sky is blue.", "probe"]


async def test_429_reaches_the_client_with_retry_after_and_no_sleep(
    fake_judge: FakeJudge, client: openai.AsyncOpenAI
) -> None:
    judge, _ = fake_judge
    started = time.monotonic()
    with pytest.raises(openai.RateLimitError) as caught:
        await ask(client, "[[status=429 retry_after=2]]")
    # with max_retries=0 the client does not wait out Retry-After itself: the caller must
    assert time.monotonic() - started < 1.0
    assert caught.value.response.headers["retry-after"] == "2"
    assert caught.value.code == "rate_limit_exceeded"
    assert judge.count() == 1


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (500, openai.InternalServerError),
        (502, openai.InternalServerError),
        (503, openai.InternalServerError),
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (404, openai.NotFoundError),
    ],
    ids=["500", "502", "503", "400", "401", "404"],
)
async def test_status_maps_to_the_client_exception(
    client: openai.AsyncOpenAI, status: int, error: type[openai.APIStatusError]
) -> None:
    with pytest.raises(error) as caught:
        await ask(client, f"[[status={status}]]")
    assert caught.value.status_code == status


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_hang_times_out_while_other_requests_are_served(
    fake_judge: FakeJudge, transport: str
) -> None:
    judge, server = fake_judge
    async with real_client(server.url, transport, max_retries=0, timeout=0.5) as client:
        hanging = asyncio.ensure_future(ask(client, "[[hang]]"))
        await asyncio.sleep(0.05)
        fast = [await ask(client, f"answer {i}") for i in range(3)]
        assert not hanging.done()
        with pytest.raises(openai.APITimeoutError):
            await hanging
    assert all(parse_answer(c.choices[0].message.content).score == 5 for c in fast)
    assert [c.status for c in judge.calls] == [None, 200, 200, 200]


async def test_malformed_body_raises_a_json_error_not_an_openai_error(
    client: openai.AsyncOpenAI,
) -> None:
    # the openai client lets json.JSONDecodeError escape for a 200 body that is not JSON
    with pytest.raises(json.JSONDecodeError) as caught:
        await ask(client, "[[malformed]]")
    assert not isinstance(caught.value, openai.OpenAIError)


async def test_garbage_content_is_unparseable(client: openai.AsyncOpenAI) -> None:
    completion = await ask(client, "[[garbage]]")
    with pytest.raises(JudgeError, match="unparseable_answer"):
        parse_answer(completion.choices[0].message.content)


async def test_refusal_sets_refusal_and_no_content(client: openai.AsyncOpenAI) -> None:
    message = (await ask(client, "[[refuse]]")).choices[0].message
    assert message.content is None
    assert message.refusal is not None
    assert "can't help" in message.refusal


async def test_context_length_is_a_bad_request_with_its_code(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await ask(client, "[[context_length]]")
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.param == "messages"


@pytest.mark.parametrize(
    ("response_format", "rejected"),
    [(JSON_SCHEMA, True), (JSON_OBJECT, False), (None, False)],
    ids=["json_schema", "json_object", "none"],
)
async def test_json_schema_rejection(
    fake_judge: FakeJudge,
    client: openai.AsyncOpenAI,
    response_format: dict[str, Any] | None,
    rejected: bool,
) -> None:
    judge, _ = fake_judge
    judge.reject_json_schema = True
    if rejected:
        with pytest.raises(openai.BadRequestError) as caught:
            await ask(client, "An answer.", response_format)
        assert caught.value.param == "response_format"
        assert caught.value.body == {
            "message": JSON_SCHEMA_REJECTED,
            "type": "invalid_request_error",
            "code": None,
            "param": "response_format",
        }
    else:
        completion = await ask(client, "An answer.", response_format)
        assert parse_answer(completion.choices[0].message.content).score == 5
    expected_type = response_format["type"] if response_format else None
    assert [c.response_format for c in judge.calls] == [expected_type]


async def test_fail_then_succeed_is_counted_per_answer(
    fake_judge: FakeJudge, client: openai.AsyncOpenAI
) -> None:
    judge, _ = fake_judge
    answer = "[[fail=2 status=503]] [[score=2]]"
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            await ask(client, answer)
    other = await ask(client, "another answer")
    completion = await ask(client, answer)
    assert parse_answer(completion.choices[0].message.content).score == 2
    assert parse_answer(other.choices[0].message.content).score == 5
    assert [c.status for c in judge.calls_for("fail=2")] == [503, 503, 200]
    assert len(judge.gaps_s("fail=2")) == 2


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_refused_connection_is_unreachable_not_a_timeout(transport: str) -> None:
    async with real_client(f"http://127.0.0.1:{free_port()}/v1", transport, max_retries=0,
                           timeout=5.0) as client:
        started = time.monotonic()
        with pytest.raises(openai.APIConnectionError) as caught:
            await ask(client, "An answer.")
    assert time.monotonic() - started < 2.0
    # The aiohttp transport reports it as APITimeoutError; the judge must still see a
    # connection failure (retried with backoff), not a timeout (never retried).
    assert isinstance(caught.value, openai.APITimeoutError) == (transport == "aiohttp")
    assert classify(caught.value).kind == "judge_unreachable"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_real_timeout_is_classified_as_one(fake_judge: FakeJudge, transport: str) -> None:
    _, server = fake_judge
    async with real_client(server.url, transport, max_retries=0, timeout=0.3) as client:
        with pytest.raises(openai.APITimeoutError) as caught:
            await ask(client, "[[hang]]")
    assert classify(caught.value).kind == "judge_timeout"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_client_retries_honour_retry_after(fake_judge: FakeJudge, transport: str) -> None:
    judge, server = fake_judge
    async with real_client(server.url, transport, max_retries=1, timeout=5.0) as client:
        completion = await ask(client, "[[fail=1 status=429 retry_after=0.6]]")
    assert parse_answer(completion.choices[0].message.content).score == 5
    [gap] = judge.gaps_s("fail=1")
    assert 0.55 <= gap < 2.0


@pytest.mark.parametrize("status", [503, 500, 429], ids=["503", "500", "429"])
async def test_outage_fails_everything_including_probes(
    fake_judge: FakeJudge, client: openai.AsyncOpenAI, status: int
) -> None:
    judge, _ = fake_judge
    judge.outage = status
    judge.retry_after_s = 1
    for answer in ("probe", "An answer. [[score=3]]"):
        with pytest.raises(openai.APIStatusError) as caught:
            await ask(client, answer)
        assert caught.value.status_code == status
        assert caught.value.response.headers["retry-after"] == "1"
    judge.outage = None
    probe = await ask(client, "probe")
    assert json.loads(probe.choices[0].message.content or "") == {"ok": True}


async def test_fail_every_nth_and_latency(
    fake_judge: FakeJudge, client: openai.AsyncOpenAI
) -> None:
    judge, _ = fake_judge
    judge.fail_every_nth = (3, 500)
    judge.latency_s = 0.05
    outcomes: list[int] = []
    started = time.monotonic()
    for i in range(6):
        try:
            await ask(client, f"answer {i}")
            outcomes.append(200)
        except openai.InternalServerError as exc:
            outcomes.append(exc.status_code)
    assert outcomes == [200, 200, 500, 200, 200, 500]
    assert time.monotonic() - started >= 6 * 0.05


async def test_delay_marker_adds_latency(client: openai.AsyncOpenAI) -> None:
    started = time.monotonic()
    completion = await ask(client, "[[delay=0.3]] [[score=1]]")
    assert time.monotonic() - started >= 0.3
    assert parse_answer(completion.choices[0].message.content).score == 1


async def test_models_list(client: openai.AsyncOpenAI) -> None:
    models = [model.id async for model in client.models.list()]
    assert models == ["scripted-judge", "gpt-4o-mini"]


def post(url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(  # noqa: S310 (loopback URL built by the test)
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize(
    "body", [b"{not json", b"[1, 2]", b""], ids=["broken-json", "not-an-object", "empty"]
)
def test_request_body_that_is_not_a_json_object_gets_400(
    fake_judge: FakeJudge, body: bytes
) -> None:
    judge, server = fake_judge
    status, error = post(f"{server.url}/chat/completions", body)
    assert status == 400
    assert error["error"]["type"] == "invalid_request_error"
    assert set(error["error"]) == {"message", "type", "code", "param"}
    assert judge.count() == 0


@pytest.mark.parametrize(
    "path", ["/v1/chat/completions", "/chat/completions"], ids=["with-v1", "without-v1"]
)
def test_both_completion_paths_are_served(fake_judge: FakeJudge, path: str) -> None:
    _, server = fake_judge
    body = json.dumps({"model": "m", "messages": messages_for("[[score=3]]")}).encode()
    status, completion = post(f"http://127.0.0.1:{server.port}{path}", body)
    assert status == 200
    assert parse_answer(completion["choices"][0]["message"]["content"]).score == 3


def test_healthz_and_unknown_path(fake_judge: FakeJudge) -> None:
    _, server = fake_judge
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5) as ok:
        assert json.loads(ok.read()) == {"ok": True}
    status, error = post(f"http://127.0.0.1:{server.port}/v1/embeddings", b"{}")
    assert (status, error["error"]["code"]) == (404, "unknown_url")


def test_stop_ends_a_hanging_request_and_frees_the_port() -> None:
    server = JudgeServer(lambda request: Reply(hang=True)).start()
    body = json.dumps({"model": "m", "messages": []}).encode()
    failure: list[BaseException] = []

    def call() -> None:
        try:
            post(f"{server.url}/chat/completions", body)
        except Exception as exc:  # the connection is cut: what the client sees
            failure.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(0.2)
    started = time.monotonic()
    server.stop()
    caller.join(timeout=5)
    assert not caller.is_alive()
    assert time.monotonic() - started < 2.0
    assert len(failure) == 1
    with pytest.raises(OSError):  # noqa: PT011 (connection refused: any OSError)
        urllib.request.urlopen(server.url.replace("/v1", "/healthz"), timeout=1)  # noqa: S310


def test_markers_parse_flags_and_values() -> None:
    found = markers("text [[fail=2 status=503]] more [[hang]] [[delay=0.3]]")
    assert found == {"fail": "2", "status": "503", "hang": "", "delay": "0.3"}


def production_judge(url: str, model: str = "gpt-4o-mini") -> OpenAIJudge:
    return build_judge("test-key", url, model, timeout_s=5.0, max_concurrency=4,
                       requests_per_minute=None, tokens_per_minute=None)


@pytest.mark.usefixtures("default_structlog")
@pytest.mark.parametrize(
    ("model", "event"),
    [("gpt-4o-mini", "judge_reachable"), ("gpt-4o-typo", "judge_model_not_listed")],
    ids=["listed", "not-listed"],
)
async def test_preflight_lists_models_and_spends_no_tokens(
    fake_judge: FakeJudge, model: str, event: str
) -> None:
    judge_calls, server = fake_judge
    judge = production_judge(server.url, model)
    try:
        with structlog.testing.capture_logs() as logs:
            await judge.preflight()
        result = await judge.judge(build_request(
            TraceEvent(trace_id="t", output="The sky is blue.", retrieved_documents=["Blue."]),
            Limits()))
    finally:
        await judge.close()
    assert [entry["event"] for entry in logs] == [event]
    assert logs[0]["model"] == model
    assert isinstance(result, Answered)
    assert judge_calls.count() == 1  # only the trace's call reached chat completions


@pytest.mark.usefixtures("default_structlog")
async def test_preflight_against_a_dead_endpoint_only_logs() -> None:
    judge = production_judge(f"http://127.0.0.1:{free_port()}/v1")
    try:
        with structlog.testing.capture_logs() as logs:
            await judge.preflight()
    finally:
        await judge.close()
    assert logs == [{"event": "judge_preflight_failed", "error": "judge_unreachable",
                     "log_level": "info"}]
    assert not judge.holding  # the breaker is the trace calls' business, not the preflight's
