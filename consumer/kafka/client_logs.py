"""aiokafka's own log lines that a normal start turns into errors, said once and plainly.

A worker that starts before its topic exists (a first deploy, a demo) reads ``Topic llm-traces
not found in cluster metadata`` at level ERROR on every metadata refresh, and on a fresh
broker ``Group Coordinator Request failed: [Error 15] CoordinatorNotAvailableError`` while the
broker creates its offsets topic: neither is a fault, and both are retried. The worker says
the first as one warning per topic (again at most every ``TOPIC_LOG_EVERY_S``) with how to
create it, and the second only if it lasts (``COORDINATOR_PATIENCE_S``), then at most once a
minute. Everything else aiokafka logs passes as it is.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import structlog

log = structlog.get_logger(__name__)

CLUSTER_LOGGER = "aiokafka.cluster"
ASSIGNOR_LOGGER = "aiokafka.coordinator.assignors.roundrobin"
COORDINATOR_LOGGER = "aiokafka.consumer.group_coordinator"
TOPIC_MISSING = "Topic %s not found in cluster metadata"
NO_PARTITIONS = "No partition metadata for topic %s"  # the assignor's, on the same topic
COORDINATOR_FAILED = "Group Coordinator Request failed: %s"
TOPIC_LOG_EVERY_S = 600.0
COORDINATOR_PATIENCE_S = 30.0
COORDINATOR_LOG_EVERY_S = 60.0


class _MissingTopics(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self._said: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == NO_PARTITIONS:
            return False  # said with the cluster's line
        if record.msg != TOPIC_MISSING or not isinstance(record.args, tuple):
            return True
        topic = str(record.args[0]) if record.args else "?"
        now = time.monotonic()
        if now - self._said.get(topic, -TOPIC_LOG_EVERY_S) >= TOPIC_LOG_EVERY_S:
            self._said[topic] = now
            log.warning("topic_missing", topic=topic,
                        detail=f"no topic {topic} on the cluster yet: the worker waits for it. "
                               f"Create it (kafka-topics.sh --create --topic {topic} "
                               "--partitions N), or let the first producer auto-create it")
        return False


class _SlowCoordinator(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self._since: float | None = None
        self._said = -COORDINATOR_LOG_EVERY_S

    def filter(self, record: logging.LogRecord) -> bool:
        error = _error(record)
        if record.msg != COORDINATOR_FAILED or error is None:
            self._since = None if record.msg != COORDINATOR_FAILED else self._since
            return True
        if not getattr(error, "retriable", False):
            return True
        now = time.monotonic()
        self._since = self._since if self._since is not None else now
        if now - self._since >= COORDINATOR_PATIENCE_S and (
                now - self._said >= COORDINATOR_LOG_EVERY_S):
            self._said = now
            log.warning("group_coordinator_unavailable", error=str(error),
                        waited_s=round(now - self._since, 1),
                        detail="the broker has not given the group a coordinator yet; retrying")
        return False


def _error(record: logging.LogRecord) -> Any:
    args = record.args if isinstance(record.args, tuple) else ()
    return next((arg for arg in args if isinstance(arg, BaseException)), None)


_filters: dict[str, logging.Filter] = {}  # one of each per process


def install() -> None:
    """Put the filters on aiokafka's loggers; idempotent."""
    missing = _filters.setdefault("missing", _MissingTopics())
    slow = _filters.setdefault("slow", _SlowCoordinator())
    for name, found in ((CLUSTER_LOGGER, missing), (ASSIGNOR_LOGGER, missing),
                        (COORDINATOR_LOGGER, slow)):
        logger = logging.getLogger(name)
        if found not in logger.filters:
            logger.addFilter(found)
