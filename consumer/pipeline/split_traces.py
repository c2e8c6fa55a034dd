"""Noticing span input that breaks the one-trace-one-partition premise, and saying so.

Assembly is per partition, so a trace is whole only if all its spans land on one partition:
the collector's Kafka exporter does that with ``partition_traces_by_id: true``, which writes
one record per trace keyed by its 32-hex trace id. Two signs that it is not set:

- a record whose key is not the one trace id it carries (no key, or spans of several
  traces): the exporter batches as it likes, so traces can land on several partitions;
- a trace this worker holds open on two of its partitions at once: certainly split.

Both are counted and logged; the warnings come once per partition (the first sign is usually
on every record). Nothing else changes: each part of a split trace is assembled on its own
partition and, its root being elsewhere, judged at its max wait.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import structlog

from consumer.kafka.partitions import Partition
from consumer.ops import metrics

log = structlog.get_logger(__name__)

ADVICE = "set partition_traces_by_id: true on the collector's Kafka exporter"


def keyed_by_its_trace(key: bytes | None, trace_ids: Collection[str]) -> bool:
    """Is the record keyed as ``partition_traces_by_id`` keys it? (no span: nothing to say)"""
    if not trace_ids:
        return True
    if key is None or len(trace_ids) != 1:
        return False
    [trace_id] = trace_ids
    return key.decode("ascii", "replace").lower() == trace_id


class SplitWatch:
    """Counts and logs the signs of split traces; one warning of each kind per partition."""

    def __init__(self) -> None:
        self._warned_unkeyed: set[Partition] = set()
        self._warned_split: set[Partition] = set()

    def record(self, tp: Partition, key: bytes | None, trace_ids: Collection[str]) -> None:
        """One record's key against the traces it carries."""
        if keyed_by_its_trace(key, trace_ids):
            return
        metrics.UNKEYED_SPAN_RECORDS.inc()
        if tp not in self._warned_unkeyed:
            self._warned_unkeyed.add(tp)
            log.warning("span_records_not_keyed_by_trace", topic=tp.topic,
                        partition=tp.partition, traces_in_record=len(trace_ids), advice=ADVICE)

    def opened(self, tp: Partition, trace_id: str, also_open_on: Iterable[Partition]) -> None:
        """A trace opened on ``tp`` while open on the other partitions given (maybe none)."""
        others = sorted(other.partition for other in also_open_on if other != tp)
        if not others:
            return
        metrics.SPLIT_TRACES.inc()
        if tp not in self._warned_split:
            self._warned_split.add(tp)
            log.warning("trace_split_across_partitions", topic=tp.topic, partition=tp.partition,
                        trace_id=trace_id, also_on=others, advice=ADVICE)
