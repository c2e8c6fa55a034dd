"""The two stand-in judges of a batch replay, each in place of the judge in the replay's own
rules (``wiring.make_rules``), so filter, sampling and the answer cache decide as in a
synchronous replay of the window.

- ``CollectingJudge`` (the first pass) calls nobody: it keeps each request it is asked as a
  batch line under its ``request_key`` (the answer cache's key: the digest of the prompt
  version, the model and the messages, so identical requests make one line) and answers with
  a placeholder that names the key. Nothing of that pass is published; the placeholder only
  tells ``request_key_of`` which request a trace's verdict came from.
- ``AnsweringJudge`` (the second pass) answers each request with the batch's result for its
  key, as the batch gave it: an answer, or the trace's own error. A request the batch did not
  answer for good (``Unanswered``: a 5xx, a 429, a time-out, a batch that expired past its
  attempts, was cancelled or failed) goes to the synchronous judge, as does one missing from
  the batch (which should not happen; a warning says so). One whose verdicts an earlier run
  published already is not asked again: it gets the batch's reason as its error, never
  published (the published-ids sink leaves its verdicts out).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from consumer.cost.judge_cache import JudgeCache
from consumer.judge.prompt import JudgeRequest
from consumer.judge.result import Answered, Judge, JudgeResult
from consumer.replay.batch.outcomes import Unanswered
from consumer.replay.batch.requests import request_line
from consumer.replay.batch.runner import FinishedBatch
from consumer.replay.batch.spool import RequestSpool
from schemas.judge import MAX_RAW_SCORE, JudgeAnswer

log = structlog.get_logger(__name__)

_KEY = re.compile(r"[0-9a-f]{64}")


def request_key(model: str, request: JudgeRequest) -> str:
    """A request's custom id in the batch: the answer cache's key for it."""
    return JudgeCache.key_for(model, request)


def request_key_of(result: JudgeResult | None) -> str | None:
    """The request key a ``CollectingJudge`` placeholder names (None for any other result)."""
    if isinstance(result, Answered) and result.attempts == 0 \
            and _KEY.fullmatch(result.answer.reason):
        return result.answer.reason
    return None


class CollectingJudge:
    """Keeps every request it is asked as a batch line in ``spool``; calls nobody."""

    def __init__(self, model: str, spool: RequestSpool) -> None:
        self.model = model
        self.holding = False
        self._spool = spool

    async def judge(self, request: JudgeRequest) -> JudgeResult:
        """A placeholder naming the request's key (attempts 0: no call was made)."""
        key = request_key(self.model, request)
        if key not in self._spool:
            self._spool.add(request_line(key, request, self.model))
        return Answered(JudgeAnswer(score=MAX_RAW_SCORE, reason=key), None, 0, 0)

    async def close(self) -> None:
        """Nothing to release."""


@dataclass(slots=True)
class BatchAnswers:
    """What the batches said, by request key: results as they are, and the requests they left
    unanswered (with the batch's reason)."""

    results: dict[str, JudgeResult] = field(default_factory=dict)
    unanswered: dict[str, Unanswered] = field(default_factory=dict)

    def add(self, finished: FinishedBatch) -> None:
        """One finished batch's outcomes (an answer wins over an earlier batch's none)."""
        self.results.update(finished.results)
        for key in finished.results:
            self.unanswered.pop(key, None)
        for key, item in finished.unanswered.items():
            if key not in self.results:
                self.unanswered[key] = item


class AnsweringJudge:
    """The batch's results; what it left unanswered from ``synchronous``. ``published(key)``
    says whether every verdict of that request was published by an earlier run."""

    def __init__(
        self, answers: BatchAnswers, synchronous: Judge, published: Callable[[str], bool]
    ) -> None:
        self._answers = answers
        self._synchronous = synchronous
        self.model = synchronous.model  # the batch's too: it is in every request key
        self._published = published
        self.sent_synchronously: Counter[str] = Counter()  # requests, by the batch's reason
        self._sent: set[str] = set()  # their keys (a call held by an outage is asked again)

    @property
    def holding(self) -> bool:
        """True while the synchronous judge is down for everyone."""
        return self._synchronous.holding

    async def judge(self, request: JudgeRequest) -> JudgeResult:
        """The batch's result for ``request``, else the synchronous judge's."""
        key = request_key(self.model, request)
        result = self._answers.results.get(key)
        if result is not None:
            return result
        unanswered = self._answers.unanswered.get(key)
        if unanswered is not None and self._published(key):
            return unanswered.as_failure()  # its verdicts are out: not paid for again
        if key not in self._sent:
            self._sent.add(key)
            if unanswered is None:
                log.warning("batch_request_missing", custom_id=key,
                            detail="not in any batch of this replay: judged synchronously")
            self.sent_synchronously[unanswered.kind if unanswered else "missing"] += 1
        return await self._synchronous.judge(request)

    def answered_by_batch(self, key: str) -> bool:
        """Did the batch answer this request (so its tokens were billed at the batch price)?"""
        return key in self._answers.results

    async def close(self) -> None:
        """Close the synchronous judge."""
        await self._synchronous.close()
