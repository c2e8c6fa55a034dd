"""One record's way: decode, then skip, dead-letter or run the rules, then publish until
acknowledged.

The pipeline runs one of these per fetched record, as its own task; when ``handle`` returns,
the record's outcome is acknowledged by the broker (every verdict of its trace, one per rule
that applies; or it was skipped), which is what lets the pipeline mark its offset done.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from consumer.errors import DecodeError, PublishError
from consumer.inputs.trace_json import decode_trace
from consumer.judge.result import JudgeResult
from consumer.ops import metrics
from consumer.pipeline.delivery.sink import Record, VerdictSink
from consumer.rules.groundedness.evaluator import Evaluation
from consumer.rules.rule_set import RuleResults, RuleSet
from schemas.trace import TraceEvent
from schemas.verdict import Source

log = structlog.get_logger(__name__)

PUBLISH_RETRY_S = (0.5, 10.0)  # first and longest wait between publish attempts


class RecordPath:
    """Takes each record to its outcome; counts outcomes (verdicts of every rule by
    pass/fail/error, skipped, not_applicable, dead_lettered) and verdicts by rule."""

    def __init__(self, sink: VerdictSink, rules: RuleSet,
                 decode: Callable[[bytes | None], TraceEvent] = decode_trace) -> None:
        self._sink = sink
        self._rules = rules
        self._decode = decode  # an event format's (inputs/formats.py)
        # Exactly once, publishing only holds a verdict for the next commit, never waiting:
        # a trace's verdicts are then held in turn, and its record marked done, with no
        # commit in between (a commit takes every held outcome: never part of a trace's).
        self._in_turn = bool(getattr(sink, "holds_until_commit", False))
        self.outcomes: Counter[str] = Counter()
        self.by_rule: Counter[tuple[str, str]] = Counter()  # (rule, verdict) -> verdicts

    async def handle(self, record: Record) -> None:
        """Return once the record's outcome is acknowledged; never raises."""
        bound = log.bind(topic=record.topic, partition=record.partition, offset=record.offset)
        try:
            await self._process(record, bound)
        except Exception as exc:  # a bug must not stall the partition: park the record
            bound.exception("record_failed")
            await self.dead_letter(record, internal_error(exc), bound, undecodable=False)

    async def _process(self, record: Record, bound: Any) -> None:
        try:
            trace = self._decode(record.value)
        except DecodeError as exc:
            await self.dead_letter(record, exc.reason, bound)
            return
        bound = bound.bind(trace_id=trace.trace_id[:200])
        source = Source(topic=record.topic, partition=record.partition, offset=record.offset)
        await self.publish_all(await self._rules.evaluate(trace, source), bound)

    async def publish_all(self, results: RuleResults, bound: Any) -> None:
        """Publish every verdict of one trace until each is acknowledged, and count what was
        left out (``RuleResults.left_out``): ``skipped`` (no answer: empty, or found nowhere),
        each rule's ``filtered`` and ``sampled_out``, ``not_applicable`` (an answer no rule
        applies to); the metric counts each rule's reason."""
        for rule, reason in results.skipped.items():
            metrics.SKIPPED.labels(rule, reason).inc()
        left_out = results.left_out()
        self.outcomes.update(left_out)
        if results.skipped:
            bound.debug("trace_skipped", reasons=results.skipped)
        elif left_out:
            bound.debug("trace_not_judged", reason="no rule applies", rules=self._rules.names)
        project = metrics.PROJECTS.label(results.project)
        if len(results.evaluations) == 1 or self._in_turn:  # no task to make for one verdict
            for evaluation in results.evaluations:
                await self.publish(evaluation, bound, project)
        else:  # each acknowledged on its own, at once
            await asyncio.gather(*(self.publish(evaluation, bound, project)
                                   for evaluation in results.evaluations))

    async def publish(self, evaluation: Evaluation, bound: Any, project: str = "") -> None:
        """Publish an evaluation's verdict until acknowledged, and count it (under the
        ``project`` label ``metrics.PROJECTS`` gave the trace's project)."""
        if evaluation.result is not None:
            _observe(evaluation.result)
        verdict = evaluation.verdict
        await self._deliver(lambda: self._sink.publish(verdict), bound)
        metrics.VERDICTS.labels(verdict.rule, verdict.verdict, project).inc()
        if verdict.cached:
            metrics.JUDGE_CACHE_HITS.inc()
        if verdict.cost_usd:
            metrics.JUDGE_COST.labels(project).inc(verdict.cost_usd)
        self.outcomes[verdict.verdict] += 1
        self.by_rule[verdict.rule, verdict.verdict] += 1
        bound.info(
            "verdict_published", rule=verdict.rule, verdict=verdict.verdict,
            score=verdict.score, latency_ms=verdict.latency_ms,
        )

    async def dead_letter(
        self, record: Record, reason: str, bound: Any, *, undecodable: bool = True
    ) -> None:
        """Dead-letter a record until acknowledged, and count it (an undecodable one also in
        ``groundedness_dead_letters``, as before; an internal error only in the outcomes)."""
        await self._deliver(lambda: self._sink.dead_letter(record, reason), bound)
        self.outcomes["dead_lettered"] += 1
        if undecodable:
            metrics.DEAD_LETTERS.inc()
            bound.info("record_dead_lettered", reason=reason)

    async def _deliver(self, send: Callable[[], Awaitable[None]], bound: Any) -> None:
        """Publish until the broker acknowledges: an outcome is never dropped."""
        delay, longest = PUBLISH_RETRY_S
        while True:
            try:
                await send()
                return
            except PublishError as exc:
                bound.warning("publish_retry", error=str(exc), retry_in_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, longest)


def internal_error(exc: Exception) -> str:
    """The dead-letter reason for a bug met on a record's way."""
    return f"internal error: {type(exc).__name__}: {exc}"[:300]


def _observe(result: JudgeResult) -> None:
    if result.attempts == 0:  # no judge call was made (an internal error's verdict)
        return
    metrics.JUDGE_LATENCY.observe(result.latency_ms / 1000)
    metrics.JUDGE_RETRIES.inc(max(0, result.attempts - 1))
    if result.usage is not None:
        metrics.JUDGE_TOKENS.labels("prompt").inc(result.usage.prompt_tokens)
        metrics.JUDGE_TOKENS.labels("completion").inc(result.usage.completion_tokens)
