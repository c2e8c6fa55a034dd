"""``AccountLimits``: any responder behind one account's requests- and tokens-per-minute limits.

OpenAI enforces its limits per account, for every client of it (all the worker replicas of
one consumer group share one): each limit is a ``Bucket``, full at the start (an account
left idle) unless ``full=False`` (one kept saturated by others: no minute's burst). Every chat
completion request counts, the worker's health probes included; one the buckets cannot admit
is answered 429 without reaching the wrapped responder, and takes nothing from them. A
request's tokens are the prompt's estimate (``estimate_tokens`` of each message's content)
plus the answer budget it asks for (``max_completion_tokens``, else ``max_tokens``, else 0),
taken when it is admitted and never adjusted to the usage reported: OpenAI, too, counts a
request up front from what it asks for.

- ``headers=True`` (OpenAI): ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` on
  every reply; a 429 names the limit in OpenAI's words ("Rate limit reached for MODEL in
  organization ORG on requests per min (RPM): Limit 600, Used 600, Requested 1. Please try
  again in 100ms.") with ``retry-after`` (whole seconds, rounded up) and ``retry-after-ms``;
  a request larger than the whole tokens limit gets "Request too large", no retry-after.
- ``headers=False`` (vLLM behind a limiter): no ``x-ratelimit-*``; a 429 has ``Retry-After``.
- ``insufficient_quota`` (a knob, settable while serving): the account is out of credit, so
  every request, probes too, is answered 429 ``insufficient_quota``, with no retry-after.

Thread-safe: the server calls it on its loop thread while a test reads ``stats()`` from its own.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from consumer.judge.prompt import estimate_tokens
from consumer.localjudge.buckets import Bucket, duration_text, whole_ms, whole_seconds
from consumer.localjudge.replies import Reply, Responder, error_reply, is_probe

RATE_LIMITED = "rate_limit_exceeded"
INSUFFICIENT_QUOTA = "insufficient_quota"
QUOTA_MESSAGE = (
    "You exceeded your current quota, please check your plan and billing details."
)
PLAIN_MESSAGE = "Rate limit exceeded. Please retry after the time given in Retry-After."
_UNITS = {"requests": "requests per min (RPM)", "tokens": "tokens per min (TPM)"}


@dataclass(frozen=True, slots=True)
class AccountStats:
    """What the account saw: replies by status, 429s by code and by limit, admit times."""

    arrived: int
    probes: int
    statuses: dict[int, int]
    rejected: dict[str, int]  # 429s the account sent, by error code
    limited_by: dict[str, int]  # rate-limit 429s by the limit that ran out: requests, tokens
    admitted_at: tuple[float, ...]  # the clock's time of each request let through

    @property
    def answered(self) -> int:
        """Requests answered 200."""
        return self.statuses.get(200, 0)

    def admitted_between(self, start: float, end: float) -> int:
        """Requests let through in ``[start, end)``."""
        return sum(1 for at in self.admitted_at if start <= at < end)


def request_tokens(request: dict[str, Any]) -> int:
    """A request's tokens as the account counts them: prompt estimate + answer budget."""
    messages = request.get("messages")
    prompt = sum(estimate_tokens(m["content"]) for m in messages or []
                 if isinstance(m, dict) and isinstance(m.get("content"), str))
    budget = request.get("max_completion_tokens") or request.get("max_tokens") or 0
    return prompt + (budget if isinstance(budget, int) else 0)


class AccountLimits:
    """A ``Responder`` that lets ``inner`` answer only what the account's limits admit."""

    def __init__(
        self,
        inner: Responder,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        *,
        headers: bool = True,
        full: bool = True,
        organization: str = "org-local",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.insufficient_quota = False
        self._inner = inner
        self._headers = headers
        self._organization = organization
        self._clock = clock
        now = clock()
        level = None if full else 0.0
        self._requests = Bucket(requests_per_minute, now, level) if requests_per_minute else None
        self._tokens = Bucket(tokens_per_minute, now, level) if tokens_per_minute else None
        self._lock = threading.Lock()
        self._arrived = self._probes = 0
        self._statuses: Counter[int] = Counter()
        self._rejected: Counter[str] = Counter()
        self._limited_by: Counter[str] = Counter()
        self._admitted_at: list[float] = []

    @property
    def requests_per_s(self) -> float | None:
        """The requests bucket's refill a second, if requests are limited."""
        return self._requests.rate_per_s if self._requests else None

    def __call__(self, request: dict[str, Any]) -> Reply:
        """Answer one chat-completions request: a 429 of the account's, or ``inner``'s reply."""
        tokens = request_tokens(request)
        model = str(request.get("model") or "gpt-4o-mini")
        with self._lock:
            now = self._clock()
            self._arrived += 1
            self._probes += is_probe(request.get("messages"))
            refused = self._refusal(now, model, tokens)
            if refused is None:
                self._admitted_at.append(now)
                for bucket, amount in ((self._requests, 1), (self._tokens, tokens)):
                    if bucket is not None:
                        bucket.take(now, amount)
            headers = self._limit_headers(now)
            if refused is not None:
                self._statuses[refused.status] += 1
                return replace(refused, headers={**headers, **refused.headers})
        # Outside the lock: the inner responder keeps its own, and may take its time.
        reply = self._inner(request)
        with self._lock:
            self._statuses[reply.status] += 1
        return replace(reply, headers={**headers, **reply.headers})

    def stats(self) -> AccountStats:
        """A snapshot of the counters."""
        with self._lock:
            return AccountStats(self._arrived, self._probes, dict(self._statuses),
                                dict(self._rejected), dict(self._limited_by),
                                tuple(self._admitted_at))

    def remaining(self) -> dict[str, float]:
        """What each limited bucket holds now: ``requests``, ``tokens``."""
        with self._lock:
            now = self._clock()
            return {name: bucket.level(now) for name, bucket in self._buckets()}

    def utilisation(self, start: float, end: float) -> float | None:
        """Requests admitted in ``[start, end)`` over the requests refilled in it."""
        if self._requests is None or end <= start:
            return None
        admitted = self.stats().admitted_between(start, end)
        return admitted / (self._requests.rate_per_s * (end - start))

    def _buckets(self) -> list[tuple[str, Bucket]]:
        pairs = (("requests", self._requests), ("tokens", self._tokens))
        return [(name, bucket) for name, bucket in pairs if bucket is not None]

    def _refusal(self, now: float, model: str, tokens: int) -> Reply | None:
        """The account's 429 for this request, or None to let it through (lock held)."""
        if self.insufficient_quota:
            self._rejected[INSUFFICIENT_QUOTA] += 1
            return error_reply(429, QUOTA_MESSAGE, INSUFFICIENT_QUOTA, INSUFFICIENT_QUOTA)
        amounts = {"requests": 1, "tokens": tokens}
        buckets = dict(self._buckets())
        waits = {name: bucket.wait_s(now, amounts[name]) for name, bucket in buckets.items()}
        if not waits or (wait_s := max(waits.values())) <= 0:
            return None
        limit = max(waits, key=lambda name: waits[name])
        self._rejected[RATE_LIMITED] += 1
        self._limited_by[limit] += 1
        bucket = buckets[limit]
        if not self._headers:
            # (A request above the whole limit never fits: it is told to wait a full window.)
            headers = {"Retry-After": str(whole_seconds(min(wait_s, 60.0)))}
            return error_reply(429, PLAIN_MESSAGE, "rate_limit_error", RATE_LIMITED,
                               headers=headers)
        asked = f"{self._organization} on {_UNITS[limit]}: Limit {bucket.limit}"
        if math.isinf(wait_s):  # more than the whole limit: no wait makes it fit
            message = (f"Request too large for {model} in organization {asked}, Requested "
                       f"{tokens}. The input or output tokens must be reduced in order to run "
                       "successfully.")
            return error_reply(429, message, limit, RATE_LIMITED)
        used = min(bucket.limit, math.ceil(bucket.capacity - bucket.level(now)))
        message = (f"Rate limit reached for {model} in organization {asked}, Used {used}, "
                   f"Requested {amounts[limit]}. Please try again in {duration_text(wait_s)}.")
        headers = {"retry-after": str(whole_seconds(wait_s)),
                   "retry-after-ms": str(whole_ms(wait_s))}
        return error_reply(429, message, limit, RATE_LIMITED, headers=headers)

    def _limit_headers(self, now: float) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-*`` after this request (lock held); none without headers."""
        if not self._headers:
            return {}
        found: dict[str, str] = {}
        for name, bucket in self._buckets():
            found[f"x-ratelimit-limit-{name}"] = str(bucket.limit)
            found[f"x-ratelimit-remaining-{name}"] = str(math.floor(bucket.level(now)))
            found[f"x-ratelimit-reset-{name}"] = duration_text(bucket.reset_s(now))
        return found
