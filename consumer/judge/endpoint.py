"""One OpenAI-compatible endpoint as the judge calls it: within the limiter, in the wording it
accepts, and asked, when a call fails, whether it answers others.

Every call waits for its turn at the pacer (the account's pace, shared with every replica:
``pacing.py``, steered by the rate-limit headers of every response, 200 and 429), then
acquires the limiter (this replica's ceiling) for the prompt plus the answer budget it is
sent with, and settles to the tokens the endpoint reports (a call refused before the model
ran, to none).
The wording (``RequestShape``) is shared by every call: a refused part or an answer cut by its
budget moves it on for all of them. A probe is a tiny request worded as the real calls are;
together with the calls it answers the one question that tells a trace's failure from an
outage: did the endpoint answer a request sent after this failure?
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import openai
import structlog
from openai import AsyncOpenAI
from openai._constants import RAW_RESPONSE_HEADER
from openai._legacy_response import LegacyAPIResponse
from openai.types.chat import ChatCompletion

from consumer.judge.account import read_account
from consumer.judge.failures import Action, Failure, classify
from consumer.judge.models import answering_model
from consumer.judge.pacing import Pacer
from consumer.judge.prompt import MAX_ANSWER_TOKENS, PROBE_MESSAGES, estimate_tokens
from consumer.judge.ratelimit import JudgeLimiter, Spend
from consumer.judge.request_shape import RequestShape, shape_for
from consumer.ops import metrics

log = structlog.get_logger(__name__)

_CALLS = metrics.JUDGE_CALLS
PREFLIGHT_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 10.0
# The probe's tokens as ``build_request`` counts a trace's: the prompt plus the answer budget.
_PROBE_TOKENS = sum(estimate_tokens(m["content"]) for m in PROBE_MESSAGES) + MAX_ANSWER_TOKENS


class Endpoint:
    """Calls, probes and the request's wording for one model on one endpoint."""

    def __init__(
        self, client: AsyncOpenAI, model: str, limiter: JudgeLimiter, timeout_s: float,
        pacer: Pacer | None = None,
    ) -> None:
        self.model = model
        self.limiter = limiter
        self.pacer = pacer or Pacer()
        self.shape = shape_for(model)  # the wording every call is sent in now
        self._client = client
        self._timeout_s = timeout_s
        self._last_success = 0.0  # when the latest request that was answered was sent
        self._last_probe = (0.0, False)  # (sent at, answered)
        self._probe_lock = asyncio.Lock()

    def too_large(self, request_tokens: int) -> str | None:
        """Why a request of this size could never pass the tokens-per-minute limit, if so."""
        estimate = self._estimate(request_tokens, self.shape)
        if self.limiter.fits(estimate):
            return None
        return (f"about {estimate:,} tokens, more than JUDGE_TOKENS_PER_MINUTE "
                f"({self.limiter.tokens_per_minute:,}) allows in a minute")

    async def call(
        self, messages: list[dict[str, str]], request_tokens: int, shape: RequestShape
    ) -> ChatCompletion:
        """One chat completion in ``shape``, at the account's pace and within the limiter;
        raises what the SDK raises."""
        await self.pacer.wait_turn()
        spend = await self.limiter.acquire(self._estimate(request_tokens, shape))
        sent_at = time.monotonic()
        return await self._send(shape.body(self.model, messages), spend, sent_at, self._timeout_s)

    async def answered_since(self, since: float) -> bool:
        """Did the endpoint answer a request sent after ``since`` (a trace's failure)? Probe if
        unknown. (Sent after, not answered after: at the start of an outage, calls sent just
        before it still succeed, and must not make the outage look like this trace.)"""
        if self._last_success > since:
            return True
        async with self._probe_lock:
            probed_at, ok = self._last_probe
            if probed_at > since:
                return ok
            return await self.probe()

    async def probe(self) -> bool:
        """A tiny request, worded as the real calls are (the same parameters, so a parameter
        every call fails on fails the probe too): does the judge answer at all?"""
        while True:
            shape = self.shape
            await self.pacer.wait_turn()  # the account counts probes too
            spend = await self.limiter.acquire(self._estimate(_PROBE_TOKENS, shape))
            sent_at = time.monotonic()
            try:
                body = shape.body(self.model, PROBE_MESSAGES)
                await self._send(body, spend, sent_at, min(self._timeout_s, PROBE_TIMEOUT_S))
            except (openai.OpenAIError, ValueError) as exc:
                failure = classify(exc)
                if failure.action is Action.RESHAPE and self.reword(shape, failure):
                    continue
                # A rate limit is the judge answering: the account is busy, not down.
                ok = failure.action is Action.WAIT
                if not ok:
                    log.info("judge_probe_failed", error=failure.kind, status=failure.status)
            else:
                ok = True
            self._last_probe = (sent_at, ok)
            return ok

    def reword(self, sent: RequestShape, failure: Failure) -> bool:
        """Reword from the shape the refused request was sent in (not from whatever the
        judge uses now: concurrent refusals of one wording must all move to the next one,
        not skip past it). False when that shape has no other wording for this part."""
        reworded = sent.without(failure.param or "")
        if reworded is None:
            return False
        shape = self.shape.merged(reworded)
        if shape != self.shape:
            self.shape = shape
            log.warning(
                "judge_request_reworded", refused=failure.param, message=failure.message,
                response_format=shape.response_format,
                token_limit=shape.token_limits[0] if shape.token_limits else None,
                temperature=shape.temperature,
            )
        return True

    def raise_budget(self, sent: RequestShape) -> bool:
        """An answer cut by the budget it was sent with: raise the answer budget for every
        call, from the shape that request used (like a rewording). False if that shape had
        the largest budget already (the answer itself was too long)."""
        raised = sent.raised()
        if raised is None:
            return False
        shape = self.shape.merged(raised)
        if shape != self.shape:
            self.shape = shape
            log.warning("judge_answer_budget_raised", answer_tokens=shape.answer_tokens,
                        cut_at=sent.answer_tokens)
        return True

    async def preflight(self) -> None:
        """One request at start-up that costs no tokens (``GET /models``), run while Kafka
        connects: it opens the first connection and readies the SDK, so the first trace's
        call goes out at once, and it says early when the endpoint does not offer the model
        (``models.py``: listed, or a model that answers any name, as the local judge does).
        Best effort: the worker starts whatever it finds (some proxies have no model list)."""
        started = time.monotonic()
        try:
            page = await self._client.models.list(
                timeout=min(self._timeout_s, PREFLIGHT_TIMEOUT_S)
            )
        except (openai.OpenAIError, ValueError) as exc:
            log.info("judge_preflight_failed", error=classify(exc).kind)
            return
        listed = [(model.id, model.owned_by) for model in page.data]
        latency_ms = round((time.monotonic() - started) * 1000)
        answering = answering_model(self.model, listed)
        if answering == self.model:
            log.info("judge_reachable", model=self.model, latency_ms=latency_ms)
        elif answering is not None:  # the local judge: any name asked, answered as itself
            log.info("judge_reachable", model=self.model, answers_as=answering,
                     latency_ms=latency_ms)
        else:
            log.warning("judge_model_not_listed", model=self.model, listed=len(listed))

    async def close(self) -> None:
        """Close the HTTP client."""
        await self._client.close()

    async def _send(
        self, body: dict[str, Any], spend: Spend | None, sent_at: float, timeout_s: float
    ) -> ChatCompletion:
        # The SDK's documented ``post`` rather than ``chat.completions.create``: create()
        # walks its ~40 parameters, our messages and the JSON schema through the SDK's
        # TypedDict transform on every call (~0.7 ms of CPU) for a body already in wire
        # form. Same endpoint, response validation, exceptions and timeout.
        # (Asked raw, for the headers: the same request, validated when parsed.)
        _CALLS.inc()
        try:
            raw = await self._client.post(
                "/chat/completions", body=body, cast_to=ChatCompletion,
                options={"timeout": timeout_s, "headers": {RAW_RESPONSE_HEADER: "true"}},
            )
            assert isinstance(raw, LegacyAPIResponse)  # noqa: S101 - asked for raw
            response: ChatCompletion = raw.parse()
        except (openai.OpenAIError, ValueError) as exc:
            failure = classify(exc)
            if isinstance(exc, openai.APIStatusError):
                self._account(exc.response.headers, failure)
            # Refused before the model ran (no connection, 4xx, 429), it cost nothing; a 5xx
            # or a timeout may have run it, so it keeps its estimate.
            if failure.consumed_nothing:
                self.limiter.settle(spend, 0)
            raise
        self._account(raw.headers, None)
        if response.usage is not None:  # the tokens the judge reports, not our estimate
            self.limiter.settle(spend, response.usage.total_tokens)
        self._last_success = max(self._last_success, sent_at)
        return response

    def _account(self, headers: Any, failure: Failure | None) -> None:
        """Steer the pace by a response's rate-limit headers (a 429 for a rate limit slows it
        too: ``attempts.py``, unless it is one trace's own); the account's state goes to the
        metrics."""
        account = read_account(headers)
        self.pacer.observe(account)
        if failure is not None and failure.status == 429:
            metrics.JUDGE_RATE_LIMITED.labels(failure.code or "none").inc()
        if account is not None:
            for name, budget in (("requests", account.requests), ("tokens", account.tokens)):
                if budget is not None:
                    metrics.JUDGE_ACCOUNT_REMAINING.labels(name).set(budget.remaining)
        if self.pacer.rate is not None:
            metrics.JUDGE_PACE.set(self.pacer.rate * 60)

    @staticmethod
    def _estimate(request_tokens: int, shape: RequestShape) -> int:
        """The limiter's count for one call: the prompt plus the answer budget it is sent
        with (a reasoning model's budget is larger than ``MAX_ANSWER_TOKENS``)."""
        return request_tokens - MAX_ANSWER_TOKENS + shape.answer_tokens
