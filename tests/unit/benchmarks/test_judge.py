"""The benchmark judge over real HTTP on loopback, through the real openai client."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import httpx2
import openai
import pytest

from benchmarks.judge import MODEL, Answers, start_asyncio


@pytest.fixture
async def judge() -> AsyncIterator[tuple[Answers, str]]:
    answers = Answers(latency_s=0.05)
    runner = await start_asyncio(answers, "127.0.0.1", 0)
    try:
        yield answers, f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_answers_after_the_latency_with_a_score_fixed_by_the_body(
    judge: tuple[Answers, str],
) -> None:
    answers, base = judge
    async with openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0,
                                  http_client=openai.DefaultAioHttpClient()) as client:
        started = time.monotonic()
        first = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "a trace"}])
        assert time.monotonic() - started >= 0.05
        again = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "a trace"}])
        models = [m.id async for m in client.models.list()]
    scores = [json.loads(c.choices[0].message.content or "")["score"] for c in (first, again)]
    assert scores[0] == scores[1]
    assert 1 <= scores[0] <= 5
    assert models == [MODEL]
    assert len(answers.arrivals) == 2


async def test_a_hang_is_never_answered_and_counted(judge: tuple[Answers, str]) -> None:
    answers, base = judge
    async with openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0,
                                  timeout=0.3) as client:
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "[[hang]]"}])
    async with httpx2.AsyncClient(base_url=base, trust_env=False, timeout=5) as http:
        stats = (await http.get("/stats")).json()
        arrivals = (await http.get("/stats/arrivals")).json()["arrivals"]
        missing = await http.get("/v1/embeddings")
        health = await http.get("/healthz")
    assert (stats["count"], stats["hangs"]) == (1, 1)
    assert arrivals == answers.arrivals
    assert missing.status_code == 404
    assert health.json() == {"ok": True}
