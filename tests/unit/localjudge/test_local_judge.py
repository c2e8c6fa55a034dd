"""The local judge answers real ``groundedness@v1`` requests through the real OpenAI client."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import openai
import pytest
import structlog
from openai.types.chat import ChatCompletionMessageParam
from openai.types.chat.completion_create_params import ResponseFormat

from consumer.judge.client import build_judge
from consumer.judge.models import ANSWERS_ANY_MODEL
from consumer.judge.prompt import (
    ANSWER_JSON_SCHEMA,
    PROBE_MESSAGES,
    Limits,
    build_request,
    parse_answer,
)
from consumer.localjudge.responder import MODEL, LocalJudge, local_judge_server
from consumer.localjudge.server import JudgeServer
from consumer.rules.groundedness.evaluator import Evaluator
from schemas.trace import TraceEvent
from tests.support.ports import free_port

DOCUMENTS = ["The Eiffel Tower was completed in 1889. It is 330 metres tall."]
RESPONSE_FORMATS: list[dict[str, Any] | None] = [
    {"type": "json_schema", "json_schema": ANSWER_JSON_SCHEMA},
    {"type": "json_object"},
    None,
]


def messages_for(output: str, **fields: Any) -> list[ChatCompletionMessageParam]:
    trace = TraceEvent.model_validate(
        {"trace_id": "t-1", "output": output, "retrieved_documents": DOCUMENTS, **fields}
    )
    return cast("list[ChatCompletionMessageParam]", build_request(trace, Limits()).messages)


@pytest.fixture(scope="module")
def local_judge() -> Iterator[JudgeServer]:
    with JudgeServer(LocalJudge()) as server:
        yield server


@pytest.fixture
async def client(local_judge: JudgeServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=local_judge.url, api_key="unused", max_retries=0, timeout=10.0
    ) as client:
        yield client


async def create(
    client: openai.AsyncOpenAI,
    messages: list[ChatCompletionMessageParam],
    response_format: dict[str, Any] | None = None,
) -> str | None:
    completion = await client.chat.completions.create(
        model="gpt-4o-mini",
        messages=messages,
        response_format=cast(ResponseFormat, response_format) if response_format else openai.omit,
    )
    assert completion.model == MODEL  # what it is, not the name asked for
    assert completion.usage is not None
    assert completion.usage.prompt_tokens > 0
    return completion.choices[0].message.content


@pytest.mark.parametrize(
    "response_format", RESPONSE_FORMATS, ids=["json_schema", "json_object", "none"]
)
@pytest.mark.parametrize(
    ("output", "passes"),
    [
        ("The Eiffel Tower was completed in 1889.", True),
        ("The Eiffel Tower was completed in 1925 by Napoleon.", False),
    ],
    ids=["supported", "unsupported"],
)
async def test_scores_a_real_request(
    client: openai.AsyncOpenAI, response_format: dict[str, Any] | None, output: str, passes: bool
) -> None:
    answer = parse_answer(await create(client, messages_for(output), response_format))
    assert (answer.score >= 3) is passes
    assert answer.unsupported_claims == ([] if passes else [output])
    assert "heuristic" in answer.reason


async def test_task_instructions_do_not_break_reading(client: openai.AsyncOpenAI) -> None:
    messages = messages_for("The Eiffel Tower is 330 metres tall.", input="How tall is it?")
    answer = parse_answer(await create(client, messages))
    assert answer.score == 5


async def test_probe_answers_ok(client: openai.AsyncOpenAI) -> None:
    content = await create(client, cast("list[ChatCompletionMessageParam]", PROBE_MESSAGES))
    assert json.loads(content or "") == {"ok": True}


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "Is the sky blue?"}],
        [{"role": "user", "content": "```json\n{not json\n```"}],
    ],
    ids=["plain-question", "broken-data-block"],
)
async def test_request_without_a_data_block_is_a_bad_request(
    client: openai.AsyncOpenAI, messages: list[ChatCompletionMessageParam]
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await create(client, messages)
    assert caught.value.param == "messages"
    assert "groundedness@v1" in caught.value.message


def test_serve_prints_its_url_and_stops_on_sigterm() -> None:
    port = free_port()
    code = f"from consumer.localjudge.responder import serve; serve('127.0.0.1', {port})"
    root = Path(__file__).resolve().parents[3]
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line == f"local judge listening on http://127.0.0.1:{port}/v1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            assert json.loads(response.read()) == {"ok": True}
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


@pytest.mark.usefixtures("default_structlog")
@pytest.mark.parametrize("model", ["gpt-4o-mini", "local-heuristic", MODEL])
async def test_the_worker_finds_the_model_it_asks_the_local_judge_for(model: str) -> None:
    """The default ``JUDGE_MODEL`` (``gpt-4o-mini``), the demo's ``local-heuristic`` or the
    local judge's own name: the worker's start-up check must not warn that the project's own
    judge does not list it, and says what answers instead."""
    with local_judge_server(port=0) as server:
        judge = build_judge("local-judge", server.url, model, timeout_s=5.0, max_concurrency=1,
                            requests_per_minute=None, tokens_per_minute=None)
        try:
            with structlog.testing.capture_logs() as logs:
                await judge.preflight()
        finally:
            await judge.close()
    assert [entry["event"] for entry in logs] == ["judge_reachable"]
    assert logs[0]["model"] == model
    assert logs[0].get("answers_as", model) == MODEL


async def test_lists_itself_alone() -> None:
    with local_judge_server(port=0) as server:
        async with openai.AsyncOpenAI(base_url=server.url, api_key="unused",
                                      max_retries=0) as client:
            page = await client.models.list()
    assert [(m.id, m.owned_by) for m in page.data] == [(MODEL, ANSWERS_ANY_MODEL)]


async def test_a_verdict_by_the_local_judge_names_it_whatever_model_was_asked_for() -> None:
    """With the default ``JUDGE_MODEL`` the verdict says the local judge, not ``gpt-4o-mini``."""
    trace = TraceEvent.model_validate({"trace_id": "t-1", "output": DOCUMENTS[0],
                                       "retrieved_documents": DOCUMENTS})
    with local_judge_server(port=0) as server:
        judge = build_judge("local-judge", server.url, "gpt-4o-mini", timeout_s=5.0,
                            max_concurrency=1, requests_per_minute=None, tokens_per_minute=None)
        try:
            evaluation = await Evaluator(judge, 0.5, Limits()).evaluate(trace)
        finally:
            await judge.close()
    assert evaluation.verdict.verdict == "pass"
    assert evaluation.verdict.judge_model == MODEL
    assert MODEL.startswith("groundedness-local-judge-v")
