"""One closed trace's way (span formats): candidate -> judge -> verdict acknowledged.

The span path's counterpart of ``records.py``: it never raises. A bug met while mapping or
judging still gives the trace an acknowledged outcome, an ``error`` verdict of type
``internal_error`` for each rule, so that no record is committed without one; only if even
that fails to publish is the trace finished with none, counted ``failed``.
"""

from __future__ import annotations

from typing import Any

from consumer.kafka.partitions import Partition
from consumer.pipeline.records import RecordPath
from consumer.rules.rule_set import RuleResults, RuleSet
from consumer.telemetry.assembly import ClosedTrace
from consumer.telemetry.trace_event import candidate
from schemas.verdict import Source


class TracePath:
    """Takes each closed trace to its outcome, counted in the record path's outcomes."""

    def __init__(self, records: RecordPath, rules: RuleSet) -> None:
        self._records = records
        self._rules = rules

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
            await self._records.publish_all(RuleResults([], "empty_output"), bound)
            return
        # The trace's first record: under exactly once its verdicts are held until the
        # watermark passes that record, which it does only once this trace is finished.
        results = await self._rules.evaluate(
            found.trace, source=_source(tp, closed), origin=found.origin
        )
        await self._records.publish_all(results, bound)


def _source(tp: Partition, closed: ClosedTrace) -> Source:
    return Source(topic=tp.topic, partition=tp.partition, offset=closed.first_offset)
