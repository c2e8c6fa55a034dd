"""The judge: one OpenAI-compatible chat call per evaluation, within limits, with retries.

Every attempt passes the circuit breaker, takes one of ``JUDGE_MAX_CONCURRENCY`` slots and
acquires the rate limiter. ``judge_failures.classify`` maps each failure to one action, and
one question tells a trace's failure from an outage: does the judge answer others (a request
sent after this failure succeeded, or else a probe worded exactly as the real calls)?

- reworded: the endpoint refused a part of the request (structured output, the token-limit
  parameter, temperature): sent again in the next wording after the one that request used;
- transient (429, 5xx, connection): retried with backoff, honouring Retry-After; a 429 is
  the account's, not the trace's, so while the judge answers others the trace goes round
  again, up to ``MAX_RATE_LIMITED_ROUNDS`` (then its ``judge_rate_limited`` error); a 429
  whose "Limit N, Requested M" has M > N never fits: the trace's error at once;
- refused (401, 403, 404, other 4xx), or transient past the retries: if the judge answers
  others, one more try (an outage may just have ended), then the trace's ``error`` verdict
  with the status and message;
- the trace's own (context too long, a content filter, larger than the token limit): its
  ``error`` verdict at once;
- an answer cut by its token budget (``finish_reason: length``): a reasoning model the name
  table missed; asked again once with the reasoning budget (for every call from then on),
  and if the largest budget is cut too, the trace's ``unparseable_answer`` error;
- failing for everyone, by any road: trip the breaker and raise ``JudgeUnavailable``.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, replace
from typing import Any, NoReturn, Protocol

import openai
import structlog
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion

from consumer.errors import JudgeError, JudgeUnavailable
from consumer.judge.breaker import CircuitBreaker
from consumer.judge.failures import Action, Failure, classify
from consumer.judge.prompt import (
    MAX_ANSWER_TOKENS,
    PROBE_MESSAGES,
    JudgeRequest,
    estimate_tokens,
    parse_answer,
)
from consumer.judge.ratelimit import JudgeLimiter, Spend
from consumer.judge.shape import RequestShape, shape_for
from schemas.judge import JudgeAnswer
from schemas.verdict import Usage

log = structlog.get_logger(__name__)

# Rounds of retries (``max_attempts`` each) one trace may go on 429s while the judge answers
# others, before its ``judge_rate_limited`` error. A limit shared by the account lands on calls
# regardless of their trace: even if one call in two got a 429, 5 rounds of 4 attempts all
# refused would happen to a trace once in a million (1 in 7, as in the chaos test: ~1e-17).
# A trace refused that often while others are answered is refused for itself (a gateway's
# per-prompt limit), and must not go round for ever (invariant 10).
MAX_RATE_LIMITED_ROUNDS = 5
PREFLIGHT_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 10.0
# The probe's tokens as ``build_request`` counts a trace's: the prompt plus the answer budget.
_PROBE_TOKENS = sum(estimate_tokens(m["content"]) for m in PROBE_MESSAGES) + MAX_ANSWER_TOKENS


@dataclass(frozen=True, slots=True)
class JudgeResult:
    """What one evaluation produced: an answer or a per-trace error, and what it cost."""

    answer: JudgeAnswer | None
    error: JudgeError | None
    usage: Usage | None
    latency_ms: int
    attempts: int


class Judge(Protocol):
    """Scores one prepared request; raises ``JudgeUnavailable`` only during an outage."""

    model: str

    @property
    def holding(self) -> bool:
        """True while the judge is down for everyone (calls wait for it to come back)."""
        ...

    async def judge(self, request: JudgeRequest) -> JudgeResult: ...

    async def close(self) -> None: ...


class OpenAIJudge:
    """A ``Judge`` over the openai SDK (its own retries off: ours go through the limiter)."""

    def __init__(
        self,
        client: AsyncOpenAI,
        model: str,
        *,
        timeout_s: float,
        max_concurrency: int,
        limiter: JudgeLimiter,
        max_attempts: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 20.0,
        probe_delay_s: float = 1.0,
    ) -> None:
        self.model = model
        self._client = client
        self._timeout_s = timeout_s
        self._slots = asyncio.Semaphore(max_concurrency)
        self._limiter = limiter
        self._max_attempts = max_attempts
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._shape = shape_for(model)
        self._last_success = 0.0
        self._last_probe = (0.0, False)
        self._probe_lock = asyncio.Lock()
        self.breaker = CircuitBreaker(self.probe, first_delay_s=probe_delay_s)

    @property
    def holding(self) -> bool:
        """True while the circuit is open."""
        return self.breaker.is_open

    async def judge(self, request: JudgeRequest) -> JudgeResult:
        """One evaluation: retries transient failures, retries an unparseable answer once."""
        started = time.monotonic()
        usage = [0, 0, 0]
        attempts = transient_failures = parse_failures = rate_limited_rounds = 0
        confirmed = False  # one more try once the judge is seen answering others
        own_429s = False  # this trace's 429s came while the judge answered others

        def result(answer: JudgeAnswer | None, error: JudgeError | None) -> JudgeResult:
            spent = Usage(prompt_tokens=usage[0], completion_tokens=usage[1], total_tokens=usage[2])
            latency_ms = round((time.monotonic() - started) * 1000)
            return JudgeResult(answer, error, spent if attempts else None, latency_ms, attempts)

        if (too_large := self._too_large(request)) is not None:
            return result(None, too_large)
        while True:
            await self.breaker.wait_closed()
            shape = self._shape
            attempts += 1
            try:
                response = await self._complete(request, shape)
            except (openai.OpenAIError, ValueError) as exc:
                failure = classify(exc)
                failed_at = time.monotonic()
                if failure.action is Action.RESHAPE:
                    if self._reshape(shape, failure):
                        continue  # the same request, reworded: never the trace's error
                    failure = _as_refusal(failure)
                if failure.action is Action.TRACE_ERROR:
                    return result(None, JudgeError(failure.kind, failure.message))
                if failure.action is Action.RETRY:
                    transient_failures += 1
                    if failure.retry_after_s is not None and not own_429s:
                        # The account's wait, for every call. Not once this trace's 429s are
                        # seen to be its own: it waits alone then (else one trace could
                        # pause everyone for all its rounds).
                        self._limiter.hold(failure.retry_after_s)
                    if transient_failures < self._max_attempts and not failure.timed_out:
                        await asyncio.sleep(self._delay(transient_failures, failure.retry_after_s))
                        continue
                # Past the retries, or refused: an outage unless the judge answers others.
                if not await self._answered_since(failed_at):
                    self._trip(failure)
                if failure.rate_limited:
                    # A rate limit is the account's, not this trace's: with the judge answering
                    # others, this trace goes round again (behind the limiter), a bounded
                    # number of times (``MAX_RATE_LIMITED_ROUNDS``).
                    rate_limited_rounds += 1
                    own_429s = True
                    if rate_limited_rounds >= MAX_RATE_LIMITED_ROUNDS:
                        return result(None, JudgeError(failure.kind, (
                            f"rate limited on {attempts} attempts while the judge answered "
                            f"others: {failure.message}")[:300]))
                    transient_failures = 0
                    await asyncio.sleep(self._delay(self._max_attempts, failure.retry_after_s))
                    continue
                if not confirmed and not failure.timed_out:
                    # The judge answers others now, but an outage may just have ended: one
                    # more try tells that apart from a failure of this very trace. (Not after
                    # a timeout: a second hang would hold a slot for another full timeout.)
                    confirmed = True
                    transient_failures = min(transient_failures, self._max_attempts - 1)
                    continue
                return result(None, JudgeError(failure.kind, failure.message))
            else:
                if response.usage is not None:
                    usage[0] += response.usage.prompt_tokens
                    usage[1] += response.usage.completion_tokens
                    usage[2] += response.usage.total_tokens
                try:
                    return result(_read_answer(response), None)
                except JudgeError as error:
                    if _cut_by_length(response, error):
                        if self._raise_budget(shape):
                            continue  # once: the shape it used is now the largest budget
                        return result(None, JudgeError("unparseable_answer", (
                            f"the judge's answer did not fit in {shape.answer_tokens:,} tokens "
                            "(finish_reason length)")))
                    parse_failures += 1
                    if error.kind == "unparseable_answer" and parse_failures < 2:
                        continue
                    return result(None, error)

    def _too_large(self, request: JudgeRequest) -> JudgeError | None:
        """An error if this request could never pass the tokens-per-minute limit."""
        estimate = self._estimate(request.estimated_tokens, self._shape)
        if self._limiter.fits(estimate):
            return None
        return JudgeError("request_too_large", (
            f"about {estimate:,} tokens, more than JUDGE_TOKENS_PER_MINUTE "
            f"({self._limiter.tokens_per_minute:,}) allows in a minute"))

    async def _complete(self, request: JudgeRequest, shape: RequestShape) -> ChatCompletion:
        async with self._slots:
            if self.breaker.is_open:  # it opened while this call waited for a slot
                raise JudgeUnavailable("judge_unavailable", "the judge is down; holding")
            spend = await self._limiter.acquire(self._estimate(request.estimated_tokens, shape))
            sent_at = time.monotonic()
            body = shape.body(self.model, request.messages)
            try:
                response = await self._post(body, self._timeout_s)
            except (openai.OpenAIError, ValueError) as exc:
                self._settle_failed(spend, exc)
                raise
        self._settle(spend, response)
        self._last_success = max(self._last_success, sent_at)
        return response

    async def _post(self, body: dict[str, Any], timeout_s: float) -> ChatCompletion:
        # The SDK's documented ``post`` rather than ``chat.completions.create``: create()
        # walks its ~40 parameters, our messages and the JSON schema through the SDK's
        # TypedDict transform on every call (~0.7 ms of CPU) for a body already in wire
        # form. Same endpoint, response validation, exceptions and timeout.
        return await self._client.post(
            "/chat/completions", body=body, cast_to=ChatCompletion, options={"timeout": timeout_s}
        )

    def _settle(self, spend: Spend | None, response: ChatCompletion) -> None:
        """Correct the limiter's estimate to the tokens the judge reports it used."""
        if response.usage is not None:
            self._limiter.settle(spend, response.usage.total_tokens)

    def _settle_failed(self, spend: Spend | None, exc: openai.OpenAIError | ValueError) -> None:
        """A failed call costs nothing if it was refused before the model ran (no
        connection, 4xx, 429); a 5xx or a timeout may have run it, so it keeps its estimate."""
        if classify(exc).consumed_nothing:
            self._limiter.settle(spend, 0)

    @staticmethod
    def _estimate(request_tokens: int, shape: RequestShape) -> int:
        """The limiter's count for one call: the prompt plus the answer budget it is sent
        with (a reasoning model's budget is larger than ``MAX_ANSWER_TOKENS``)."""
        return request_tokens - MAX_ANSWER_TOKENS + shape.answer_tokens

    def _reshape(self, sent: RequestShape, failure: Failure) -> bool:
        """Reword from the shape the refused request was sent in (not from whatever the
        judge uses now: concurrent refusals of one wording must all move to the next one,
        not skip past it). False when that shape has no other wording for this part."""
        reworded = sent.without(failure.param or "")
        if reworded is None:
            return False
        shape = self._shape.merged(reworded)
        if shape != self._shape:
            self._shape = shape
            log.warning(
                "judge_request_reworded", refused=failure.param, message=failure.message,
                response_format=shape.response_format,
                token_limit=shape.token_limits[0] if shape.token_limits else None,
                temperature=shape.temperature,
            )
        return True

    def _raise_budget(self, sent: RequestShape) -> bool:
        """An answer cut by the budget it was sent with: raise the answer budget for every
        call, from the shape that request used (like a rewording). False if that shape had
        the largest budget already (the answer itself was too long)."""
        raised = sent.raised()
        if raised is None:
            return False
        shape = self._shape.merged(raised)
        if shape != self._shape:
            self._shape = shape
            log.warning("judge_answer_budget_raised", answer_tokens=shape.answer_tokens,
                        cut_at=sent.answer_tokens)
        return True

    def _delay(self, failures: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return retry_after_s
        ceiling = min(self._max_backoff_s, self._backoff_s * 2 ** (failures - 1))
        return random.uniform(ceiling / 2, ceiling)  # noqa: S311 - jitter, not security

    def _trip(self, failure: Failure) -> NoReturn:
        self.breaker.trip(
            failure.kind, status=failure.status, param=failure.param, message=failure.message
        )
        raise JudgeUnavailable(failure.kind, failure.message)

    async def _answered_since(self, since: float) -> bool:
        """Did the judge answer a request sent after this trace's last failure? Probe if
        unknown. (Sent after, not answered after: at the start of an outage, calls sent
        just before it still succeed, and must not make the outage look like this trace.)"""
        if self._last_success > since:
            return True
        async with self._probe_lock:
            probed_at, ok = self._last_probe
            if probed_at > since:
                return ok
            return await self.probe()

    async def preflight(self) -> None:
        """One request at start-up that costs no tokens (``GET /models``), run while Kafka
        connects: it opens the first connection and readies the SDK, so the first trace's
        call goes out at once, and it says early when the endpoint does not offer the model.
        Best effort: the worker starts whatever it finds (some proxies have no model list)."""
        started = time.monotonic()
        try:
            page = await self._client.models.list(
                timeout=min(self._timeout_s, PREFLIGHT_TIMEOUT_S)
            )
        except (openai.OpenAIError, ValueError) as exc:
            log.info("judge_preflight_failed", error=classify(exc).kind)
            return
        listed = {model.id for model in page.data}
        if self.model in listed:
            log.info("judge_reachable", model=self.model,
                     latency_ms=round((time.monotonic() - started) * 1000))
        else:
            log.warning("judge_model_not_listed", model=self.model, listed=len(listed))

    async def probe(self) -> bool:
        """A tiny request, worded as the real calls are (the same parameters, so a parameter
        every call fails on fails the probe too): does the judge answer at all?"""
        while True:
            shape = self._shape
            spend = await self._limiter.acquire(self._estimate(_PROBE_TOKENS, shape))
            sent_at = time.monotonic()
            try:
                body = shape.body(self.model, PROBE_MESSAGES)
                response = await self._post(body, min(self._timeout_s, PROBE_TIMEOUT_S))
            except (openai.OpenAIError, ValueError) as exc:
                self._settle_failed(spend, exc)
                failure = classify(exc)
                if failure.action is Action.RESHAPE and self._reshape(shape, failure):
                    continue
                log.info("judge_probe_failed", error=failure.kind, status=failure.status)
                ok = False
            else:
                ok = True
                self._settle(spend, response)
                self._last_success = max(self._last_success, sent_at)
            self._last_probe = (sent_at, ok)
            return ok

    async def close(self) -> None:
        """Stop probing and close the HTTP client."""
        await self.breaker.close()
        await self._client.close()


def _as_refusal(failure: Failure) -> Failure:
    """A refusal of a part the request's wording has no fallback for: decided like any
    other refusal (the judge failing for everyone on it holds)."""
    return replace(failure, action=Action.CHECK_OTHERS, kind=f"judge_http_{failure.status}")


def _cut_by_length(response: Any, error: JudgeError) -> bool:
    """Was the answer unreadable because the token budget ran out (empty or cut off)?"""
    return (error.kind == "unparseable_answer" and bool(response.choices)
            and response.choices[0].finish_reason == "length")


def _read_answer(response: Any) -> JudgeAnswer:
    if not response.choices:
        raise JudgeError("unparseable_answer", "the judge returned no choices")
    choice = response.choices[0]
    refusal = getattr(choice.message, "refusal", None)
    if refusal or choice.finish_reason == "content_filter":
        raise JudgeError("refused", str(refusal or "the judge's content filter stopped it")[:300])
    return parse_answer(choice.message.content)


def build_judge(
    api_key: str,
    base_url: str | None,
    model: str,
    *,
    timeout_s: float,
    max_concurrency: int,
    requests_per_minute: int | None,
    tokens_per_minute: int | None,
) -> OpenAIJudge:
    """The production judge for these settings."""
    client = AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        max_retries=0,
        timeout=timeout_s,
        # Responses of the wrong shape raise instead of arriving half-built.
        _strict_response_validation=True,
        # The SDK's aiohttp transport: at 64 concurrent calls it costs about 1 ms of CPU per
        # call less than the default httpx pool, the difference between ~0.91 and ~0.96 of
        # the Little's-law bound on 2 cores (benchmarks: throughput at 64 slots).
        http_client=openai.DefaultAioHttpClient(),
    )
    limiter = JudgeLimiter(requests_per_minute, tokens_per_minute)
    return OpenAIJudge(
        client, model, timeout_s=timeout_s, max_concurrency=max_concurrency, limiter=limiter
    )
