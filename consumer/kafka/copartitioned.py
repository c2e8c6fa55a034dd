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
refuses them at start, in one line, and ``CountWatch`` stops a running worker the same way
when partitions are added to one topic later (the consumer's metadata, refreshed every
``METADATA_MAX_AGE_MS``, shows it, and the group rebalances). A topic not created yet is
waited for (``wait_for``), never subscribed to: subscribing would auto-create it with the
broker's default partition count.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import structlog
from aiokafka import AIOKafkaConsumer
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from consumer.errors import ConfigError
from consumer.kafka import compat as aiokafka_compat
from consumer.kafka.partitions import Partition

log = structlog.get_logger(__name__)

METADATA_MAX_AGE_MS = 60_000  # aiokafka's is 5 min: a count changed is seen within a minute
WAIT_CHECK_S = 5.0  # a missing topic is looked for this often
WAIT_LOG_EVERY_S = 60.0


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


async def wait_for(consumer: AIOKafkaConsumer, topics: Sequence[str],
                   stop: asyncio.Event) -> bool:
    """Return once every topic exists (True), or once ``stop`` is set (False); say which are
    missing at once, then at most once a minute."""
    said_at = -WAIT_LOG_EVERY_S
    while not stop.is_set():
        existing = await consumer.topics()  # the whole cluster's: naming one could create it
        missing = [topic for topic in topics if topic not in existing]
        if not missing:
            return True
        if time.monotonic() - said_at >= WAIT_LOG_EVERY_S:
            said_at = time.monotonic()
            log.warning("topics_missing", topics=missing,
                        detail="waiting for them: create each with the same number of "
                               "partitions as the other (the worker does not subscribe "
                               "before, which would auto-create them with the broker's default)")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), WAIT_CHECK_S)
    return False


async def check(consumer: AIOKafkaConsumer, topics: Sequence[str]) -> None:
    """``ConfigError`` (one line) when the topics have different partition counts."""
    for topic in topics:
        await aiokafka_compat.load_topic(consumer, topic)
    if (problem := _counts_differ(consumer, topics)) is not None:
        raise ConfigError(problem)


def _counts_differ(consumer: AIOKafkaConsumer, topics: Sequence[str]) -> str | None:
    counts = {topic: len(found) for topic in topics
              if (found := consumer.partitions_for_topic(topic))}
    if len(set(counts.values())) < 2:
        return None
    described = ", ".join(f"{topic} has {count}" for topic, count in counts.items())
    return ("the spans and logs topics must have the same number of partitions (both keyed by "
            f"trace id, a trace's spans and log records must land on the same number): "
            f"{described}")


class CountWatch:
    """A rebalance observer that stops the worker (``error`` then says why: exit code 2)
    when the topics' partition counts came to differ while it ran."""

    def __init__(self, consumer: AIOKafkaConsumer, topics: Sequence[str],
                 stop: asyncio.Event) -> None:
        self._consumer, self._topics, self._stop = consumer, tuple(topics), stop
        self.error: ConfigError | None = None

    def partitions_assigned(self, assigned: set[Partition]) -> None:
        """Compare the counts the consumer's metadata holds now."""
        problem = _counts_differ(self._consumer, self._topics)
        if problem is not None and self.error is None:
            self.error = ConfigError(problem)
            log.error("partition_counts_differ", detail=problem)
            self._stop.set()

    def partitions_revoked(self, revoked: set[Partition]) -> None:
        """Nothing to compare until the new assignment."""
