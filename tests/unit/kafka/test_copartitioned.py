"""The co-partitioned assignor: every member owns the same partition numbers of each topic it
reads, all partitions are owned once, and the load is even; aiokafka's default deals the two
topics round the members in one run, which does not."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest
import structlog
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from consumer.kafka.clients import new_consumer
from consumer.kafka.copartitioned import CoPartitionedAssignor, CountWatch
from consumer.settings import Settings

SPANS, LOGS = "otlp_spans", "otlp_logs"


class Cluster:
    """Just what an assignor asks of the cluster's metadata."""

    def __init__(self, partitions: Mapping[str, int]) -> None:
        self._partitions = partitions

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        count = self._partitions.get(topic)
        return None if count is None else set(range(count))


def _assign(assignor: type[AbstractPartitionAssignor], partitions: int, members: int,
            topics: tuple[str, ...] = (SPANS, LOGS)) -> dict[str, dict[str, set[int]]]:
    metadata = {f"member-{n}": ConsumerProtocolMemberMetadata(0, list(topics), b"")
                for n in range(members)}
    cluster = Cluster(dict.fromkeys(topics, partitions))
    assigned = assignor.assign(cluster, metadata)
    return {member: {topic: set(numbers) for topic, numbers in assignment.assignment}
            for member, assignment in assigned.items()}


@pytest.mark.parametrize(("partitions", "members"), [(5, 3), (5, 2), (12, 5), (3, 4), (1, 1)])
def test_each_member_owns_the_same_numbers_of_both_topics_and_every_partition_once(
    partitions: int, members: int,
) -> None:
    owned = _assign(CoPartitionedAssignor, partitions, members)
    for member, topics in owned.items():
        assert topics.get(SPANS, set()) == topics.get(LOGS, set()), member
    for topic in (SPANS, LOGS):
        numbers = [n for topics in owned.values() for n in topics.get(topic, set())]
        assert sorted(numbers) == list(range(partitions)), "each partition owned exactly once"
    loads = [len(topics.get(SPANS, set())) for topics in owned.values()]
    assert max(loads) - min(loads) <= 1, "as even as the count allows"


def test_round_robin_would_split_a_trace_between_two_workers() -> None:
    owned = _assign(RoundRobinPartitionAssignor, 5, 3)
    assert any(topics[SPANS] != topics[LOGS] for topics in owned.values())


def test_a_member_reading_the_spans_alone_gets_its_numbers_of_that_topic() -> None:
    metadata = {"a": ConsumerProtocolMemberMetadata(0, [SPANS, LOGS], b""),
                "b": ConsumerProtocolMemberMetadata(0, [SPANS], b"")}
    assigned = CoPartitionedAssignor.assign(Cluster({SPANS: 4, LOGS: 4}), metadata)
    owned = {m: dict(a.assignment) for m, a in assigned.items()}
    assert owned == {"a": {SPANS: [0, 2], LOGS: [0, 2]}, "b": {SPANS: [1, 3]}}
    # (A member without OTLP_LOGS_TOPIC offers the round robin alone, so such a group deals by
    # that instead; the pipeline warns of the partitions left unpaired.)


async def test_the_consumer_prefers_it_and_falls_back_to_what_older_members_offer() -> None:
    consumer = new_consumer(Settings(), "c", "g", copartitioned=True)
    try:
        assert consumer._partition_assignment_strategy == (
            CoPartitionedAssignor, RoundRobinPartitionAssignor)
    finally:
        await consumer.stop()


class Metadata:
    """The consumer's view of the topics' partitions, as a test sets it."""

    def __init__(self, **counts: int) -> None:
        self.counts = counts

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        count = self.counts.get(topic)
        return None if count is None else set(range(count))


def test_a_count_that_came_to_differ_stops_the_worker_with_one_line() -> None:
    metadata, stop = Metadata(spans=3, logs=3), asyncio.Event()
    watch = CountWatch(metadata, ["spans", "logs"], stop)
    watch.partitions_assigned(set())
    assert (watch.error, stop.is_set()) == (None, False)
    metadata.counts["logs"] = 6  # kafka-topics.sh --alter --partitions 6, seen on a rebalance
    with structlog.testing.capture_logs() as logs:
        watch.partitions_assigned(set())
    assert stop.is_set()
    assert str(watch.error) == (
        "the spans and logs topics must have the same number of partitions (both keyed by trace "
        "id, a trace's spans and log records must land on the same number): spans has 3, logs "
        "has 6")
    assert [entry["event"] for entry in logs] == ["partition_counts_differ"]
