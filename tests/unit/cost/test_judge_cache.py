"""JUDGE_CACHE_SIZE: keyed by what the judge sees, bounded LRU, errors never kept, one call
for identical requests in flight, and a failed or cancelled first call never failing or
stranding the requests that waited on it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from consumer.cost.judge_cache import JudgeCache
from consumer.judge.prompt import JudgeRequest, Limits, build_request
from consumer.judge.result import Answered, JudgeResult, TraceFailed
from schemas.judge import JudgeAnswer
from schemas.trace import TraceEvent
from schemas.verdict import Usage

MODEL = "gpt-4o-mini"
USAGE = Usage(prompt_tokens=900, completion_tokens=40, total_tokens=940)
ANSWERED = Answered(JudgeAnswer(score=5, reason="Supported."), USAGE, latency_ms=800, attempts=1)
HIT = Answered(ANSWERED.answer, Usage(), latency_ms=0, attempts=0)  # what a hit returns
FAILED = TraceFailed("judge_http_400", "refused", USAGE, latency_ms=300, attempts=1)
# No wait in these tests may last: a hang fails after this long instead of pytest's 300 s.
HANG = 10


def request(trace_id: str = "t-1", output: str = "Paris.", documents: tuple[str, ...] = (
        "Paris is the capital of France.",), question: str = "Capital?",
        limits: Limits | None = None) -> JudgeRequest:
    trace = TraceEvent.model_validate({"trace_id": trace_id, "output": output, "input": question,
                                       "retrieved_documents": list(documents)})
    return build_request(trace, limits or Limits())


class Judge:
    """A judge call that answers in order from a script, optionally held until released."""

    def __init__(self, *results: JudgeResult | BaseException) -> None:
        self.results = list(results)
        self.calls = 0
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self) -> JudgeResult:
        self.calls += 1
        self.started.set()
        await self.release.wait()
        result = self.results.pop(0)
        if isinstance(result, BaseException):
            raise result
        return result


# The key: what the judge sees, nothing else.

def test_traces_the_judge_would_read_alike_share_a_key() -> None:
    key = JudgeCache.key_for(MODEL, request())
    assert JudgeCache.key_for(MODEL, request(trace_id="another-trace")) == key
    assert len(key) == 64
    assert "Paris" not in key


@pytest.mark.parametrize("differs", [
    lambda: JudgeCache.key_for("gpt-4o", request()),
    lambda: JudgeCache.key_for(MODEL, request(), version="groundedness@v2"),
    lambda: JudgeCache.key_for(MODEL, request(output="Lyon.")),
    lambda: JudgeCache.key_for(MODEL, request(documents=("Lyon is in France.",))),
    lambda: JudgeCache.key_for(MODEL, request(documents=("Paris is the capital of France.",
                                                         "Another document."))),
    lambda: JudgeCache.key_for(MODEL, request(question="Capital of France?")),
])
def test_a_different_model_version_answer_context_or_input_is_another_key(
        differs: Callable[[], str]) -> None:
    assert differs() != JudgeCache.key_for(MODEL, request())


def test_text_past_the_cut_is_not_seen_so_not_in_the_key() -> None:
    limits = Limits(max_document_chars=10, max_output_chars=6)
    cut = JudgeCache.key_for(MODEL, request(output="Paris. And more.", limits=limits))
    assert cut == JudgeCache.key_for(MODEL, request(output="Paris. Otherwise.", limits=limits))


def test_a_lone_surrogate_in_a_trace_still_makes_a_key() -> None:
    assert JudgeCache.key_for(MODEL, request(output="Paris \ud800.")) != JudgeCache.key_for(
        MODEL, request(output="Paris \ud801."))


# Hits, misses, eviction, errors.

async def test_a_repeated_request_is_answered_from_the_cache_at_no_cost() -> None:
    cache, judge = JudgeCache(10), Judge(ANSWERED)
    key = cache.key_for(MODEL, request())
    first = await cache.answer(key, judge)
    again = await cache.answer(key, judge)
    assert first == (ANSWERED, False)
    assert again == (HIT, True)  # the same answer; no tokens, time or attempt spent
    assert judge.calls == 1
    assert (cache.hits, cache.misses) == (1, 1)


def test_get_and_put_count_and_evict_the_least_recently_used() -> None:
    cache = JudgeCache(2)
    cache.put("a", ANSWERED)
    cache.put("b", ANSWERED)
    assert cache.get("a") is not None  # a is now more recent than b
    cache.put("c", ANSWERED)
    assert len(cache) == 2
    assert cache.get("b") is None
    assert cache.get("a") is not None
    assert cache.get("c") is not None
    cache.put("d", ANSWERED)  # after a, then c were used: a is the oldest
    assert cache.get("a") is None
    assert (cache.hits, cache.misses) == (3, 2)


async def test_a_trace_error_is_never_cached() -> None:
    cache, judge = JudgeCache(10), Judge(FAILED, ANSWERED)
    key = cache.key_for(MODEL, request())
    assert await cache.answer(key, judge) == (FAILED, False)
    assert await cache.answer(key, judge) == (ANSWERED, False)
    assert judge.calls == 2
    cache.put("other", FAILED)
    assert cache.get("other") is None


async def test_an_exception_is_not_cached_and_reaches_only_its_caller() -> None:
    cache, judge = JudgeCache(10), Judge(RuntimeError("judge down"), ANSWERED)
    key = cache.key_for(MODEL, request())
    with pytest.raises(RuntimeError, match="judge down"):
        await cache.answer(key, judge)
    assert await asyncio.wait_for(cache.answer(key, judge), HANG) == (ANSWERED, False)


async def test_size_zero_calls_the_judge_every_time_and_keeps_nothing() -> None:
    cache, judge = JudgeCache(0), Judge(ANSWERED, ANSWERED)
    key = cache.key_for(MODEL, request())
    assert await cache.answer(key, judge) == (ANSWERED, False)
    assert await cache.answer(key, judge) == (ANSWERED, False)
    cache.put(key, ANSWERED)
    assert cache.get(key) is None
    assert (judge.calls, len(cache), cache.hits, cache.misses) == (2, 0, 0, 0)


def test_a_negative_size_is_refused() -> None:
    with pytest.raises(ValueError, match="0 or more"):
        JudgeCache(-1)


# Identical requests in flight at once.

async def held(judge: Judge, *calls: Awaitable[tuple[JudgeResult, bool]]
               ) -> list[tuple[JudgeResult, bool] | BaseException]:
    """Start the calls while the judge holds its first answer, then let it answer."""
    judge.release.clear()
    tasks = [asyncio.ensure_future(call) for call in calls]
    await asyncio.wait_for(judge.started.wait(), HANG)
    for _ in range(3):
        await asyncio.sleep(0)  # every caller reaches the cache before the answer
    judge.release.set()
    return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), HANG)


async def test_identical_requests_in_flight_pay_once() -> None:
    cache, judge = JudgeCache(10), Judge(ANSWERED)
    key = cache.key_for(MODEL, request())
    results = await held(judge, *(cache.answer(key, judge) for _ in range(5)))
    assert judge.calls == 1
    assert results == [(ANSWERED, False), *[(HIT, True)] * 4]
    assert (cache.hits, cache.misses) == (4, 1)


async def test_different_requests_in_flight_each_call() -> None:
    cache, judge = JudgeCache(10), Judge(ANSWERED, ANSWERED)
    keys = [cache.key_for(MODEL, request(output=text)) for text in ("Paris.", "Lyon.")]
    await held(judge, *(cache.answer(key, judge) for key in keys))
    assert judge.calls == 2


@pytest.mark.parametrize("first", [FAILED, RuntimeError("judge down")],
                         ids=["trace_error", "exception"])
async def test_a_failed_first_call_does_not_fail_its_waiters(
        first: JudgeResult | BaseException) -> None:
    cache, judge = JudgeCache(10), Judge(first, ANSWERED)
    key = cache.key_for(MODEL, request())
    results = await held(judge, *(cache.answer(key, judge) for _ in range(4)))
    # The first caller gets its failure; one waiter calls again; the others wait for it.
    assert results[0] == ((first, False) if isinstance(first, TraceFailed) else first)
    assert results[1:] == [(ANSWERED, False), (HIT, True), (HIT, True)]
    assert judge.calls == 2
    assert (cache.hits, cache.misses) == (2, 2)


async def test_a_cancelled_first_caller_leaves_its_waiter_to_call() -> None:
    cache, judge = JudgeCache(10), Judge(ANSWERED, ANSWERED)
    key = cache.key_for(MODEL, request())
    judge.release.clear()
    first = asyncio.ensure_future(cache.answer(key, judge))
    await asyncio.wait_for(judge.started.wait(), HANG)
    waiter = asyncio.ensure_future(cache.answer(key, judge))
    await asyncio.sleep(0)  # the waiter is waiting on the first call
    first.cancel()
    judge.release.set()
    assert await asyncio.wait_for(waiter, HANG) == (ANSWERED, False)
    assert first.cancelled()
    assert judge.calls == 2
    assert (await cache.answer(key, judge))[1] is True  # the waiter's answer was kept


async def test_a_cancelled_waiter_does_not_cancel_the_call_it_waited_on() -> None:
    cache, judge = JudgeCache(10), Judge(ANSWERED)
    key = cache.key_for(MODEL, request())
    judge.release.clear()
    first = asyncio.ensure_future(cache.answer(key, judge))
    await asyncio.wait_for(judge.started.wait(), HANG)
    waiter = asyncio.ensure_future(cache.answer(key, judge))
    await asyncio.sleep(0)
    waiter.cancel()
    judge.release.set()
    assert await asyncio.wait_for(first, HANG) == (ANSWERED, False)
    assert waiter.cancelled()
    assert judge.calls == 1
    assert cache.get(key) is not None
