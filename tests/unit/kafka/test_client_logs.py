"""aiokafka's lines that a normal first start makes errors of: a missing topic is one warning
that says how to create it; a coordinator not yet available is said only if it lasts; the
rest of aiokafka's lines pass untouched."""

from __future__ import annotations

import logging

import pytest
import structlog
from aiokafka.errors import CoordinatorNotAvailableError, GroupAuthorizationFailedError

from consumer.kafka import client_logs
from tests.support.logs import collected_records


@pytest.fixture(autouse=True)
def installed() -> None:
    client_logs.install()
    client_logs.install()  # idempotent: one filter per logger


def test_a_missing_topic_is_one_warning_naming_it_and_aiokafkas_lines_are_held() -> None:
    cluster = logging.getLogger(client_logs.CLUSTER_LOGGER)
    assignor = logging.getLogger(client_logs.ASSIGNOR_LOGGER)
    with collected_records(client_logs.CLUSTER_LOGGER) as raw, \
            collected_records(client_logs.ASSIGNOR_LOGGER) as raw_assignor, \
            structlog.testing.capture_logs() as said:
        for _ in range(5):  # every metadata refresh
            cluster.error(client_logs.TOPIC_MISSING, "missing-topic-a")
            assignor.warning(client_logs.NO_PARTITIONS, "missing-topic-a")
        cluster.error("Topic %s is not authorized for this client", "secret-topic")
    assert [r.getMessage() for r in raw] == [
        "Topic secret-topic is not authorized for this client"]
    assert raw_assignor == []
    assert [(e["event"], e["topic"]) for e in said] == [("topic_missing", "missing-topic-a")]
    assert "kafka-topics.sh --create --topic missing-topic-a" in said[0]["detail"]
    assert sum(len(logging.getLogger(name).filters) for name in (
        client_logs.CLUSTER_LOGGER, client_logs.ASSIGNOR_LOGGER)) == 2


def test_a_coordinator_not_yet_available_is_said_only_if_it_lasts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    coordinator = logging.getLogger(client_logs.COORDINATOR_LOGGER)
    clock = [1_000.0]
    monkeypatch.setattr("consumer.kafka.client_logs.time.monotonic", lambda: clock[0])
    with collected_records(client_logs.COORDINATOR_LOGGER) as raw, \
            structlog.testing.capture_logs() as said:
        for _ in range(3):  # a fresh broker's first seconds
            coordinator.error(client_logs.COORDINATOR_FAILED, CoordinatorNotAvailableError())
            clock[0] += 1.0
        assert (raw, said) == ([], [])
        clock[0] += client_logs.COORDINATOR_PATIENCE_S
        for _ in range(10):
            coordinator.error(client_logs.COORDINATOR_FAILED, CoordinatorNotAvailableError())
            clock[0] += 1.0
        coordinator.error(client_logs.COORDINATOR_FAILED, GroupAuthorizationFailedError("g"))
    assert [e["event"] for e in said] == ["group_coordinator_unavailable"], "once a minute"
    assert [r.levelno for r in raw] == [logging.ERROR], "a fault that is not retried passes"
