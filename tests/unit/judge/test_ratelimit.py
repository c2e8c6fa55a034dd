"""The judge's rate limits, on a virtual clock: no 60 s window above either limit, ever.

Every test runs the real ``JudgeLimiter`` (aiolimiter for requests, the token ledger for
tokens) on ``VirtualClockLoop``, so a minute passes in microseconds and the admission times
are exact: the window property is checked, not timed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.judge.prompt import MAX_ANSWER_TOKENS, Limits, build_request, estimate_tokens
from consumer.judge.ratelimit import JudgeLimiter
from schemas.trace import TraceEvent
from tests.support.virtual_clock import run_virtual

WINDOW_S = 60.0


def busiest_window(admissions: Sequence[tuple[float, int]]) -> int:
    """The most any half-open 60 s window ``(t - 60, t]`` holds (one always ends at an
    admission, so only those ends need checking)."""
    return max(
        sum(amount for at, amount in admissions if end - WINDOW_S < at <= end)
        for end, _ in admissions
    )


def test_tokens_stay_within_the_limit_after_an_idle_spell() -> None:
    """A minute-deep bucket admitted a full minute's tokens at once and then its drip: ~2x."""
    limit = 10_000

    async def main() -> list[tuple[float, int]]:
        limiter = JudgeLimiter(None, limit)
        loop = asyncio.get_running_loop()
        admitted: list[tuple[float, int]] = []
        await asyncio.sleep(600)  # idle: whatever the limiter stores, it is full now

        async def call() -> None:
            await limiter.acquire(1_000)
            admitted.append((loop.time(), 1_000))

        await asyncio.gather(*(call() for _ in range(60)))
        return admitted

    admitted = run_virtual(main())
    assert len(admitted) == 60
    assert busiest_window(admitted) == limit  # respected, and used: 10 calls a minute
    assert admitted[-1][0] - admitted[0][0] < 5 * WINDOW_S + 1


def test_reported_usage_replaces_the_estimate() -> None:
    async def main() -> tuple[float, int]:
        limiter = JudgeLimiter(None, 10_000)
        spend = await limiter.acquire(6_000)
        limiter.settle(spend, 1_000)  # the judge reported 1,000 tokens used
        await limiter.acquire(8_000)  # fits now: 1,000 + 8,000
        return asyncio.get_running_loop().time(), limiter.tokens_in_window()

    admitted_at, counted = run_virtual(main())
    assert admitted_at < 1e-6  # at once (the virtual clock only ticks)
    assert counted == 9_000


def test_a_settled_call_wakes_a_waiting_one() -> None:
    async def main() -> tuple[bool, float]:
        limiter = JudgeLimiter(None, 10_000)
        first = await limiter.acquire(9_000)
        waiting = asyncio.ensure_future(limiter.acquire(5_000))
        await asyncio.sleep(1.0)
        blocked = not waiting.done()
        limiter.settle(first, 2_000)
        await waiting
        return blocked, asyncio.get_running_loop().time()

    blocked, admitted_at = run_virtual(main())
    assert blocked
    assert admitted_at < 1.01  # not at 60 s, when the first call's estimate would leave


def test_a_call_larger_than_the_limit_never_fits() -> None:
    assert JudgeLimiter(None, 1_000).fits(1_000)
    assert not JudgeLimiter(None, 1_000).fits(1_001)
    assert JudgeLimiter(600, None).fits(10**9)


def test_retry_after_holds_every_caller() -> None:
    async def main() -> float:
        limiter = JudgeLimiter(None, None)
        limiter.hold(7.5)
        await limiter.acquire(10)
        return asyncio.get_running_loop().time()

    assert run_virtual(main()) >= 7.5


@pytest.mark.parametrize("rate", [1, 31, 62, 1_200])
def test_requests_stay_within_the_rate_after_an_idle_spell(rate: int) -> None:
    async def main() -> list[tuple[float, int]]:
        limiter = JudgeLimiter(rate, None)
        loop = asyncio.get_running_loop()
        admitted: list[tuple[float, int]] = []
        await asyncio.sleep(600)

        async def call() -> None:
            await limiter.acquire(100)
            admitted.append((loop.time(), 1))

        await asyncio.gather(*(call() for _ in range(3 * rate)))
        return admitted

    admitted = run_virtual(main())
    busiest = busiest_window(admitted)
    assert busiest <= rate
    assert busiest >= 0.95 * rate - 1  # 60/62 of the rate, and the first second's depth


Call = tuple[float, int, float, float]  # gap before it (s), estimate, used / estimate, latency


@settings(max_examples=60, deadline=None)
@given(
    requests_per_minute=st.none() | st.integers(1, 400),
    tokens_per_minute=st.integers(2_000, 40_000),
    calls=st.lists(
        st.tuples(st.floats(0, 90), st.integers(1, 2_000), st.floats(0, 1), st.floats(0, 40)),
        min_size=1, max_size=40,
    ),
)
def test_no_window_exceeds_either_limit(
    requests_per_minute: int | None, tokens_per_minute: int, calls: list[Call]
) -> None:
    """Any arrivals, any latencies, usage at or under the estimate: in every 60 s window
    the tokens really used and the requests sent stay within the limits."""

    async def main() -> tuple[list[tuple[float, int]], list[tuple[float, int]]]:
        limiter = JudgeLimiter(requests_per_minute, tokens_per_minute)
        loop = asyncio.get_running_loop()
        used: list[tuple[float, int]] = []
        sent: list[tuple[float, int]] = []

        async def call(arrival_s: float, estimate: int, fraction: float, latency_s: float) -> None:
            await asyncio.sleep(arrival_s)
            spend = await limiter.acquire(estimate)
            admitted_at = loop.time()
            sent.append((admitted_at, 1))
            await asyncio.sleep(latency_s)
            tokens = round(estimate * fraction)
            limiter.settle(spend, tokens)
            used.append((admitted_at, tokens))

        arrival = 0.0
        tasks = []
        for gap_s, estimate, fraction, latency_s in calls:
            arrival += gap_s
            tasks.append(call(arrival, estimate, fraction, latency_s))
        await asyncio.gather(*tasks)
        return used, sent

    used, sent = run_virtual(main())
    assert len(sent) == len(calls)
    assert busiest_window(used) <= tokens_per_minute
    if requests_per_minute is not None:
        assert busiest_window(sent) <= requests_per_minute


def test_non_latin_text_counts_at_least_a_token_a_character() -> None:
    """chars / 4 counted 1,500 kanji as ~375 tokens; tokenizers spend about one or more each."""
    text = "東京は日本の首都であり、" * 125  # 1,500 characters
    request = build_request(
        TraceEvent(trace_id="t", output=text, retrieved_documents=[text]), Limits()
    )
    assert request.estimated_tokens >= 2 * len(text) + MAX_ANSWER_TOKENS


def test_the_estimate_counts_ascii_at_four_characters_a_token() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("a" * 400) == 100
    assert estimate_tokens("é" * 10) == 10
    assert estimate_tokens("ab" * 200 + "東京") == 102
