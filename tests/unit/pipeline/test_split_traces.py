"""Signs that the exporter does not keep a trace on one partition: counted, warned once."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition
from structlog.testing import capture_logs

from consumer.ops.metrics import REGISTRY
from consumer.pipeline.split_traces import SplitWatch, keyed_by_its_trace

TRACE = "0af7651916cd43dd8448eb211c80319c"
OTHER = "4bf92f3577b34da6a3ce929d0e0e4736"
P0, P1, P2 = (TopicPartition("otlp_spans", n) for n in range(3))


def _count(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


@pytest.mark.parametrize(
    ("key", "trace_ids", "expected"),
    [
        (TRACE.encode(), {TRACE}, True),  # partition_traces_by_id
        (TRACE.upper().encode(), {TRACE}, True),  # hex case is not a difference
        (None, set(), True),  # no valid span: the record says nothing
        (None, {TRACE}, False),  # the exporter's default: no key
        (TRACE.encode(), {TRACE, OTHER}, False),  # a batch of several traces
        (OTHER.encode(), {TRACE}, False),  # keyed by something else
        (b"\xff\xfe", {TRACE}, False),  # not even text
    ],
)
def test_a_record_is_keyed_by_its_trace_only_when_the_key_is_its_one_trace_id(
    key: bytes | None, trace_ids: set[str], expected: bool
) -> None:
    assert keyed_by_its_trace(key, trace_ids) is expected


def test_unkeyed_records_are_all_counted_and_warned_once_per_partition() -> None:
    watch, before = SplitWatch(), _count("groundedness_unkeyed_span_records_total")
    with capture_logs() as logs:
        for tp in (P0, P0, P1, P0):
            watch.record(tp, None, {TRACE, OTHER})
        watch.record(P2, TRACE.encode(), {TRACE})
    assert _count("groundedness_unkeyed_span_records_total") == before + 4
    warnings = [entry for entry in logs if entry["event"] == "span_records_not_keyed_by_trace"]
    assert [entry["partition"] for entry in warnings] == [0, 1]
    assert "partition_traces_by_id" in warnings[0]["advice"]


def test_a_trace_open_on_another_partition_is_counted_as_split() -> None:
    watch, before = SplitWatch(), _count("groundedness_split_traces_total")
    with capture_logs() as logs:
        watch.opened(P1, TRACE, [])  # only here: not split
        watch.opened(P1, TRACE, [P1])  # itself does not count
        watch.opened(P1, TRACE, [P2, P0])
        watch.opened(P1, OTHER, [P0])
    assert _count("groundedness_split_traces_total") == before + 2
    [warning] = [entry for entry in logs if entry["event"] == "trace_split_across_partitions"]
    assert (warning["partition"], warning["trace_id"], warning["also_on"]) == (1, TRACE, [0, 2])
