"""The Batch API tests' parts: the fake judge's batch endpoints over real HTTP, the real openai
client on them, and judge requests scripted by the fake judge's markers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import openai
import pytest

from consumer.judge.prompt import JudgeRequest, Limits, build_request
from consumer.localjudge.batches import BatchService
from consumer.localjudge.server import JudgeServer
from consumer.replay.batch.requests import BatchLine, request_line
from schemas.trace import TraceEvent
from tests.support.fake_judge import ScriptedJudge

MODEL = "scripted-judge"


class ManualClock:
    """Epoch seconds that move only when a test moves them."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class BatchApi:
    """The fake judge, its server and an SDK client on it."""

    judge: ScriptedJudge
    server: JudgeServer
    client: openai.AsyncOpenAI

    @property
    def batches(self) -> BatchService:
        """The server's batch endpoints (their knobs)."""
        return self.server.batches


@pytest.fixture
async def batch_api(fake_judge: tuple[ScriptedJudge, JudgeServer]) -> AsyncIterator[BatchApi]:
    """The batch endpoints with no time in each state, and the client the worker uses (the
    SDK's aiohttp transport)."""
    judge, server = fake_judge
    server.batches.seconds_per_state = 0.0
    client = openai.AsyncOpenAI(
        api_key="sk-test", base_url=server.url, max_retries=0, timeout=10.0,
        http_client=openai.DefaultAioHttpClient(),
    )
    async with client:
        yield BatchApi(judge, server, client)


def judge_request(answer: str) -> JudgeRequest:
    """The real ``groundedness@v1`` request for ``answer`` (markers script the fake judge)."""
    trace = TraceEvent.model_validate(
        {"trace_id": "t", "output": answer, "retrieved_documents": ["The sky is blue."]}
    )
    return build_request(trace, Limits())


def judge_line(custom_id: str, answer: str | None = None, model: str = MODEL) -> BatchLine:
    """The batch line for ``answer`` (default: an answer naming its id, score 5)."""
    return request_line(custom_id, judge_request(answer or f"Answer {custom_id}."), model)
