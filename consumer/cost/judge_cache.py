"""``JUDGE_CACHE_SIZE``: judge answers reused within one worker, keyed by what the judge sees.

The key is a SHA-256 digest of the rule's version, the judge model and the request's messages
(which hold the cut answer, the cut context and the input), canonically encoded: two traces
whose judge would read the same text share an answer, and the cache holds 64 hex characters
per entry rather than the texts. It is a bounded LRU; size 0 disables it.

Only an ``Answered`` is kept: a trace's error (``TraceFailed``) or an outage is never reused.
A hit spent nothing, so it comes back with zero usage, no latency and no attempts: cost
accounting needs no special case for it, and the caller marks the verdict ``cached``.

``answer`` is single-flight: a request identical to one already in flight waits for it
rather than paying for the same answer twice. If that first call fails (an error, an
exception, or its caller cancelled), a waiter does not inherit the failure: it calls the
judge itself, and further waiters wait for it in turn.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from consumer.judge.prompt import PROMPT_VERSION, JudgeRequest
from consumer.judge.result import Answered, JudgeResult
from schemas.verdict import Usage

# Names the encoding below, inside every key: change both together.
_KEY_FORMAT = "judge-cache/v1"


class JudgeCache:
    """A bounded LRU of judge answers, with hit and miss counts; ``size`` 0 disables it."""

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError(f"judge cache size must be 0 or more, got {size}")
        self.size = size
        self.hits = 0  # answers given from the cache (a waiter served by the call it waited on)
        self.misses = 0  # answers the judge was called for
        self._answers: OrderedDict[str, Answered] = OrderedDict()
        self._in_flight: dict[str, asyncio.Event] = {}

    def __len__(self) -> int:
        return len(self._answers)

    @staticmethod
    def key_for(model: str, request: JudgeRequest, version: str = PROMPT_VERSION) -> str:
        """The digest of what the judge sees: rule version, model, messages."""
        encoded = json.dumps(
            [_KEY_FORMAT, version, model, request.messages],
            # One text for one content: sorted keys, no spaces, every non-ASCII character
            # escaped (a lone surrogate from a JSON "\\ud800" included, which UTF-8 refuses).
            sort_keys=True, separators=(",", ":"), ensure_ascii=True,
        )
        return hashlib.sha256(encoded.encode("ascii")).hexdigest()

    def get(self, key: str) -> Answered | None:
        """The cached answer as a hit (zero usage), now the most recently used; None if absent.
        Counted as a hit or a miss (not when the cache is disabled)."""
        found = self._lookup(key)
        if self.size:
            if found is None:
                self.misses += 1
            else:
                self.hits += 1
        return found

    def put(self, key: str, result: JudgeResult) -> None:
        """Keep an answer, evicting the least recently used past ``size``; anything but an
        ``Answered`` is ignored."""
        if self.size == 0 or not isinstance(result, Answered):
            return
        self._answers[key] = result
        self._answers.move_to_end(key)
        while len(self._answers) > self.size:
            self._answers.popitem(last=False)

    async def answer(self, key: str, call: Callable[[], Awaitable[JudgeResult]]
                     ) -> tuple[JudgeResult, bool]:
        """The result for ``key`` and whether it came from the cache: cached, from an identical
        call in flight, or from ``call`` (whose exceptions propagate to this caller only)."""
        if self.size == 0:
            return await call(), False
        while True:
            if (cached := self._lookup(key)) is not None:
                self.hits += 1
                return cached, True
            leader = self._in_flight.get(key)
            if leader is None:
                break
            # Our cancellation cancels only our wait, never the call we wait on.
            await leader.wait()
        self.misses += 1
        done = self._in_flight[key] = asyncio.Event()
        try:
            result = await call()
            self.put(key, result)
            return result, False
        finally:
            # Success, error, exception or cancellation: the waiters look again (a hit, or
            # one of them calls).
            del self._in_flight[key]
            done.set()

    def _lookup(self, key: str) -> Answered | None:
        found = self._answers.get(key)
        if found is None:
            return None
        self._answers.move_to_end(key)
        # A hit spent nothing: no tokens, no time, no attempt.
        return dataclasses.replace(found, usage=Usage(), latency_ms=0, attempts=0)
