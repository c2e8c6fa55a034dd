"""One closed trace's way (span formats): candidate -> judge -> verdict acknowledged.

The span path's counterpart of ``records.py``: it never raises. A bug met while mapping or
judging still gives the trace an acknowledged outcome, an ``error`` verdict of type
``internal_error`` for each rule, so that no record is committed without one; only if even
that fails to publish is the trace finished with none, counted ``failed``.

A candidate whose answer no span or log record recorded (``no_answer_found``) is skipped and
counted as such, and warned about at most once a minute with the names its LLM calls did carry
(``unanswered.py``): the usual cause is a setup the worker reads nothing from (content capture
off, the logs topic not read), which a team should hear about rather than find a silent count.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from consumer.kafka.partitions import Partition
from consumer.pipeline.records import RecordPath
from consumer.rules.rule_set import RuleResults, RuleSet
from consumer.telemetry.assembly import ClosedTrace
from consumer.telemetry.trace_event import candidate
from consumer.telemetry.unanswered import names_seen
from schemas.verdict import Source

# At most one warning this often about traces whose answer was found nowhere.
NO_ANSWER_LOG_EVERY_S = 60.0


class TracePath:
    """Takes each closed trace to its outcome, counted in the record path's outcomes."""

    def __init__(self, records: RecordPath, rules: RuleSet, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._records = records
        self._rules = rules
        self._clock = clock
        self._no_answer_logged_at = -float("inf")
        self._no_answer_unlogged = 0  # such traces since the last warning

    async def handle(self, tp: Partition, closed: ClosedTrace, bound: Any) -> None:
        """Return once the trace's outcome is acknowledged (its verdict, or none due)."""
        try:
            await self._outcome(tp, closed, bound)
        except Exception as exc:  # a bug must not hold the partition's watermark for good
            bound.exception("trace_failed")
            try:
                failures = self._rules.failed(closed.trace_id, _source(tp, closed), exc)
                await self._records.publish_all(RuleResults(failures), bound)
            except Exception:
                bound.exception("trace_error_unpublished")
                self._records.outcomes["failed"] += 1

    async def _outcome(self, tp: Partition, closed: ClosedTrace, bound: Any) -> None:
        found = candidate(closed)
        if found == "no_candidate":  # no LLM call, and no answer with documents
            self._records.outcomes["no_candidate"] += 1
            bound.debug("trace_not_judged", reason="no candidate", spans=len(closed.spans))
            return
        if found == "empty_answer":
            await self._records.publish_all(self._rules.skip_all("empty_output"), bound)
            return
        if found == "no_answer_found":
            await self._records.publish_all(self._rules.skip_all("no_answer_found"), bound)
            self._warn_no_answer(closed, bound)
            return
        # The trace's first record: under exactly once its verdicts are held until the
        # watermark passes that record, which it does only once this trace is finished.
        results = await self._rules.evaluate(
            found.trace, source=_source(tp, closed), origin=found.origin
        )
        await self._records.publish_all(results, bound)


    def _warn_no_answer(self, closed: ClosedTrace, bound: Any) -> None:
        """The warning, at most every ``NO_ANSWER_LOG_EVERY_S``, naming what this trace's LLM
        calls carried (the count keeps every trace)."""
        self._no_answer_unlogged += 1
        now = self._clock()
        if now - self._no_answer_logged_at < NO_ANSWER_LOG_EVERY_S:
            return
        seen = names_seen(closed.spans)
        bound.warning(
            "trace_answer_not_found", traces=self._no_answer_unlogged,
            every_s=NO_ANSWER_LOG_EVERY_S, attributes=list(seen.attributes),
            events=list(seen.events), names_left_out=seen.left_out,
            hint="no span or log record of its LLM calls holds the answer where a supported "
                 "convention puts it: is message content capture on, and are the GenAI log "
                 "records read (OTLP_LOGS_TOPIC)? docs/spans.md lists what is read",
        )
        self._no_answer_logged_at, self._no_answer_unlogged = now, 0


def _source(tp: Partition, closed: ClosedTrace) -> Source:
    return Source(topic=tp.topic, partition=tp.partition, offset=closed.first_offset)
