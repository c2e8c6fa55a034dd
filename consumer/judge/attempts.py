"""One trace's way through the judge: its attempts, until an answer, its error, or an outage.

Every attempt passes the circuit breaker, takes one of ``JUDGE_MAX_CONCURRENCY`` slots and
acquires the rate limiter. ``failures.classify`` maps each failure to one action, and one
question tells a trace's failure from an outage: does the judge answer others (a request sent
after this failure succeeded, or else a probe worded exactly as the real calls)?

- reworded (RESHAPE): the endpoint refused a part of the request (structured output, the
  token-limit parameter, temperature): sent again in the next wording after the one that
  request used;
- transient (RETRY, WAIT): retried with backoff, honouring Retry-After; a 429 for a rate
  limit (WAIT) is the account's, shared by every replica: backpressure, never an outage
  (the pacer slows every call), so past the retries the trace goes round again, up to
  ``MAX_RATE_LIMITED_ROUNDS`` (then its ``judge_rate_limited`` error); a 429 whose
  "Limit N, Requested M" has M > N never fits: the trace's error at once;
- the judge's own word that it fails for everyone (HOLD: ``insufficient_quota``): hold at once;
- refused (HOLD_OR_CONFIRM: 401, 403, 404, other 4xx), or transient past the retries: if the
  judge answers others, one more try (an outage may just have ended), then the trace's
  ``error`` verdict with the status and message; timed out (HOLD_OR_ERROR): the error at once;
- the trace's own (ERROR: context too long, a content filter, larger than the token limit):
  its ``error`` verdict at once;
- an answer cut by its token budget (``finish_reason: length``): a reasoning model the name
  table missed; asked again once with the reasoning budget (for every call from then on),
  and if the largest budget is cut too, the trace's ``unparseable_answer`` error;
- failing for everyone, by any road: trip the breaker and raise ``JudgeUnavailable``.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any, NoReturn

import openai
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion

from consumer.errors import JudgeError, JudgeUnavailable
from consumer.judge.breaker import CircuitBreaker
from consumer.judge.endpoint import Endpoint
from consumer.judge.failures import Action, Failure, classify
from consumer.judge.prompt import JudgeRequest, parse_answer
from consumer.judge.request_shape import RequestShape
from consumer.judge.result import Answered, JudgeResult, TraceFailed
from schemas.judge import JudgeAnswer
from schemas.verdict import Usage

# Rounds of retries (``max_attempts`` each) one trace may go on 429s while the judge answers
# others, before its ``judge_rate_limited`` error. A limit shared by the account lands on calls
# regardless of their trace: even if one call in two got a 429, 5 rounds of 4 attempts all
# refused would happen to a trace once in a million (1 in 7, as in the chaos test: ~1e-17).
# A trace refused that often while others are answered is refused for itself (a gateway's
# per-prompt limit), and must not go round for ever (invariant 10).
MAX_RATE_LIMITED_ROUNDS = 5


@dataclass(frozen=True, slots=True)
class Retries:
    """How many times, and after how long, a failing call is tried again."""

    max_attempts: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 20.0

    def delay_s(self, failures: int, retry_after_s: float | None) -> float:
        """The endpoint's Retry-After, else an exponential backoff with jitter."""
        if retry_after_s is not None:
            return retry_after_s
        ceiling = min(self.max_backoff_s, self.backoff_s * 2 ** (failures - 1))
        return random.uniform(ceiling / 2, ceiling)  # noqa: S311 - jitter, not security


class TraceAttempts:
    """The attempts at one trace: what they cost, and how its failures are decided."""

    def __init__(
        self,
        endpoint: Endpoint,
        breaker: CircuitBreaker,
        slots: asyncio.Semaphore,
        retries: Retries,
    ) -> None:
        self._endpoint = endpoint
        self._breaker = breaker
        self._slots = slots
        self._retries = retries
        self._started = time.monotonic()
        # prompt, completion, total, cached prompt tokens: as the judge reported them
        self._tokens = [0, 0, 0, 0]
        self._attempts = self._transient_failures = self._parse_failures = 0
        self._rate_limited_rounds = 0
        self._confirmed = False  # one more try once the judge is seen answering others
        self._own_429s = False  # this trace's 429s came while the judge answered others
        self._model: str | None = None  # the model the latest response named

    async def run(self, request: JudgeRequest) -> JudgeResult:
        """Attempt until an answer or this trace's error; ``JudgeUnavailable`` on an outage."""
        if (too_large := self._endpoint.too_large(request.estimated_tokens)) is not None:
            return self._failed("request_too_large", too_large)
        while True:
            await self._breaker.wait_closed()
            shape = self._endpoint.shape
            self._attempts += 1
            try:
                response = await self._call(request, shape)
            except (openai.OpenAIError, ValueError) as exc:
                failure = classify(exc)
                outcome = await self._after_failure(failure, shape, time.monotonic())
            else:
                outcome = self._after_response(response, shape)
            if outcome is not None:
                return outcome

    async def _call(self, request: JudgeRequest, shape: RequestShape) -> ChatCompletion:
        async with self._slots:
            if self._breaker.is_open:  # it opened while this call waited for a slot
                raise JudgeUnavailable("judge_unavailable", "the judge is down; holding")
            return await self._endpoint.call(request.messages, request.estimated_tokens, shape)

    async def _after_failure(
        self, failure: Failure, sent: RequestShape, failed_at: float
    ) -> JudgeResult | None:
        """This trace's result after a failed call, or None to try again."""
        if failure.action is Action.RESHAPE:
            if self._endpoint.reword(sent, failure):
                return None  # the same request, reworded: never the trace's error
            failure = failure.as_refusal()
        if failure.action is Action.ERROR:
            return self._failed(failure.kind, failure.message)
        if failure.action is Action.HOLD:
            self._trip(failure)
        if failure.action in (Action.RETRY, Action.WAIT):
            self._transient_failures += 1
            if failure.action is Action.WAIT and not self._own_429s:
                # The account's wait and pace, for every call. Not once this trace's 429s are
                # seen to be its own: it waits alone then (else one trace could slow everyone
                # for all its rounds).
                self._endpoint.pacer.rate_limited()
                if failure.retry_after_s is not None:
                    self._endpoint.limiter.hold(failure.retry_after_s)
            elif failure.retry_after_s is not None and not self._own_429s:
                self._endpoint.limiter.hold(failure.retry_after_s)
            if self._transient_failures < self._retries.max_attempts:
                failures = self._transient_failures
                await asyncio.sleep(self._retries.delay_s(failures, failure.retry_after_s))
                return None
        if failure.action is Action.WAIT:  # the account's limit: slower, never an outage
            return await self._go_round(failure)
        # Past the retries, refused, or timed out: an outage unless the judge answers others.
        if not await self._endpoint.answered_since(failed_at):
            self._trip(failure)
        if failure.action is Action.HOLD_OR_ERROR or self._confirmed:
            # (No second try after a timeout: another hang would hold a slot for another
            # full timeout.)
            return self._failed(failure.kind, failure.message)
        # The judge answers others now, but an outage may just have ended: one more try
        # tells that apart from a failure of this very trace.
        self._confirmed = True
        self._transient_failures = min(self._transient_failures, self._retries.max_attempts - 1)
        return None

    async def _go_round(self, failure: Failure) -> JudgeResult | None:
        """A rate limit is the account's, not this trace's: with the judge answering others,
        this trace goes round again (behind the limiter), ``MAX_RATE_LIMITED_ROUNDS`` at most."""
        self._rate_limited_rounds += 1
        self._own_429s = True
        if self._rate_limited_rounds >= MAX_RATE_LIMITED_ROUNDS:
            return self._failed(failure.kind, (
                f"rate limited on {self._attempts} attempts while the judge answered "
                f"others: {failure.message}")[:300])
        self._transient_failures = 0
        max_attempts = self._retries.max_attempts
        await asyncio.sleep(self._retries.delay_s(max_attempts, failure.retry_after_s))
        return None

    def _after_response(self, response: ChatCompletion, sent: RequestShape) -> JudgeResult | None:
        """The answer in a response, this trace's error, or None to ask again."""
        self._model = response.model or self._model
        if response.usage is not None:
            self._tokens[0] += response.usage.prompt_tokens
            self._tokens[1] += response.usage.completion_tokens
            self._tokens[2] += response.usage.total_tokens
            self._tokens[3] += cached_tokens(response.usage)
        try:
            answer = read_answer(response)
        except JudgeError as error:
            if _cut_by_length(response, error):
                if self._endpoint.raise_budget(sent):
                    return None  # once: the shape it used is now the largest budget
                return self._failed("unparseable_answer", (
                    f"the judge's answer did not fit in {sent.answer_tokens:,} tokens "
                    "(finish_reason length)"))
            self._parse_failures += 1
            if error.kind == "unparseable_answer" and self._parse_failures < 2:
                return None
            return self._failed(error.kind, error.message)
        return Answered(answer, self._usage(), self._latency_ms(), self._attempts, self._model)

    def _failed(self, kind: str, message: str) -> TraceFailed:
        return TraceFailed(kind, message, self._usage(), self._latency_ms(), self._attempts,
                           self._model)

    def _usage(self) -> Usage | None:
        if not self._attempts:
            return None
        prompt, completion, total, cached = self._tokens
        return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total,
                     cached_tokens=cached)

    def _latency_ms(self) -> int:
        return round((time.monotonic() - self._started) * 1000)

    def _trip(self, failure: Failure) -> NoReturn:
        self._breaker.trip(
            failure.kind, status=failure.status, param=failure.param, message=failure.message
        )
        raise JudgeUnavailable(failure.kind, failure.message)


def _cut_by_length(response: Any, error: JudgeError) -> bool:
    """Was the answer unreadable because the token budget ran out (empty or cut off)?"""
    return (error.kind == "unparseable_answer" and bool(response.choices)
            and response.choices[0].finish_reason == "length")


def cached_tokens(usage: CompletionUsage) -> int:
    """The prompt tokens the provider's cache served (``prompt_tokens_details``; 0 when it
    does not say, as most OpenAI-compatible servers do not)."""
    details = usage.prompt_tokens_details
    return (details.cached_tokens or 0) if details is not None else 0


def read_answer(response: Any) -> JudgeAnswer:
    if not response.choices:
        raise JudgeError("unparseable_answer", "the judge returned no choices")
    choice = response.choices[0]
    refusal = getattr(choice.message, "refusal", None)
    if refusal or choice.finish_reason == "content_filter":
        raise JudgeError("refused", str(refusal or "the judge's content filter stopped it")[:300])
    return parse_answer(choice.message.content)
