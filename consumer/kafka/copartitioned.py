"""Co-partitioned topics: a worker owns the same partition numbers of each.

With ``OTLP_LOGS_TOPIC`` a trace's spans and its GenAI log records come on two topics, each
keyed by trace id (the collector's ``partition_traces_by_id`` and
``partition_logs_by_trace_id``), so both land on the same partition number when the topics
have the same partition count. The worker that assembles partition 3 of the spans must then
read partition 3 of the logs too. Kafka's own range assignor happens to do so; the round
robin aiokafka uses by default does not. This assignor says it: each partition number goes to
one member, with every subscribed topic's partition of that number.

A worker reading two topics offers it first and the round robin second. The broker picks a
strategy every member offers, so while older members (or replicas without
``OTLP_LOGS_TOPIC``) are in the group it is the round robin: the new members are not refused
(which would stall a rolling deploy), and the pipeline warns of the partitions it got without
their pair (``SpanPath.unpaired``); the traces on those are judged without their log records
until the last old member leaves and the next rebalance deals by number.

Different partition counts break the keying itself (one trace id, two numbers): ``check``
refuses them at start, in one line.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from aiokafka import AIOKafkaConsumer
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from consumer.errors import ConfigError
from consumer.kafka import compat as aiokafka_compat


class CoPartitionedAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """Partition numbers dealt round the members (sorted, so every leader deals alike);
    each member takes its numbers of every topic it subscribes to."""

    name = "copartitioned"
    version = 0

    @classmethod
    def assign(
        cls, cluster: ClusterMetadata, members: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        """The assignment of every member: member id -> (topic, partitions) pairs."""
        topics = sorted({topic for metadata in members.values() for topic in metadata.subscription})
        numbers = sorted({number for topic in topics
                          for number in cluster.partitions_for_topic(topic) or ()})
        ordered = sorted(members)
        owner = {number: ordered[index % len(ordered)] for index, number in enumerate(numbers)}
        assignment: dict[str, dict[str, list[int]]] = defaultdict(dict)
        for member in ordered:
            for topic in sorted(members[member].subscription):
                mine = sorted(number for number in cluster.partitions_for_topic(topic) or ()
                              if owner[number] == member)
                if mine:
                    assignment[member][topic] = mine
        return {
            member: ConsumerProtocolMemberAssignment(
                cls.version, sorted(assignment[member].items()), b"")
            for member in members
        }

    @classmethod
    def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        """What this member subscribes to."""
        return ConsumerProtocolMemberMetadata(cls.version, list(topics), b"")

    @classmethod
    def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
        """Nothing to remember between rebalances."""


async def check(consumer: AIOKafkaConsumer, topics: Sequence[str]) -> None:
    """``ConfigError`` (one line) when the topics that exist have different partition
    counts; a topic not created yet is left to the group to wait for."""
    existing = await consumer.topics()  # asked first: naming a missing topic could create it
    for topic in topics:
        if topic in existing:
            await aiokafka_compat.load_topic(consumer, topic)
    counts = {topic: len(found) for topic in topics
              if (found := consumer.partitions_for_topic(topic))}
    if len(set(counts.values())) > 1:
        described = ", ".join(f"{topic} has {count}" for topic, count in counts.items())
        raise ConfigError(
            f"the spans and logs topics must have the same number of partitions (both keyed by "
            f"trace id, a trace's spans and log records must land on the same number): "
            f"{described}")
