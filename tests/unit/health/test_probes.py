"""Liveness and readiness: pure functions of a ``HealthState`` snapshot."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

import consumer.health.probes
from consumer.health.probes import HealthState, liveness, readiness

NOW = 1000.0
WEDGED_S = 60.0
STALE_S = 20.0
HEALTHY = HealthState(last_fetch_at=NOW - 0.1, draining=False, joined=True,
                      kafka_ok_at=NOW - 2, kafka_error=None)


@pytest.mark.parametrize(
    ("state", "alive", "detail"),
    [
        pytest.param(HEALTHY, True, "ok", id="ticking"),
        pytest.param(replace(HEALTHY, last_fetch_at=None, kafka_ok_at=None), True, "starting",
                     id="not-started-yet"),
        pytest.param(replace(HEALTHY, last_fetch_at=NOW - 59), True, "ok", id="slow-tick"),
        pytest.param(replace(HEALTHY, last_fetch_at=NOW - 61), False, "stuck", id="wedged"),
        pytest.param(replace(HEALTHY, last_fetch_at=NOW - 61, kafka_error="TimeoutError"), True,
                     "unreachable Kafka", id="stale-tick-while-kafka-down"),
        pytest.param(replace(HEALTHY, last_fetch_at=NOW - 61, kafka_ok_at=NOW - 30), True,
                     "unreachable Kafka", id="stale-tick-no-recent-broker-answer"),
        pytest.param(replace(HEALTHY, last_fetch_at=NOW - 300, draining=True), True, "draining",
                     id="draining"),
    ],
)
def test_liveness(state: HealthState, alive: bool, detail: str) -> None:
    check = liveness(state, NOW, wedged_after_s=WEDGED_S, stale_after_s=STALE_S)
    assert check.ok is alive
    assert detail in check.detail


@pytest.mark.parametrize(
    ("state", "ready", "detail"),
    [
        pytest.param(HEALTHY, True, "ready", id="ready"),
        pytest.param(replace(HEALTHY, joined=False), False, "joining", id="not-joined"),
        pytest.param(replace(HEALTHY, last_fetch_at=None, kafka_ok_at=None, joined=False), False,
                     "starting", id="before-start"),
        pytest.param(replace(HEALTHY, kafka_ok_at=None), False, "first broker check",
                     id="no-check-yet"),
        pytest.param(replace(HEALTHY, kafka_error="KafkaError: Unable to get cluster metadata"),
                     False, "kafka unreachable: KafkaError", id="broker-gone"),
        pytest.param(replace(HEALTHY, kafka_ok_at=NOW - 21), False, "no recent answer",
                     id="checks-stopped-answering"),
        pytest.param(replace(HEALTHY, draining=True), False, "draining", id="draining"),
        pytest.param(replace(HEALTHY, last_fetch_at=None, draining=True), False, "draining",
                     id="stopped-before-start"),
        pytest.param(replace(HEALTHY, waiting={"t-2": "KafkaConnectionError: x", "t-1": "y"}),
                     False, "2 partition(s) not started, t-1: y", id="partitions-waiting"),
    ],
)
def test_readiness(state: HealthState, ready: bool, detail: str) -> None:
    check = readiness(state, NOW, stale_after_s=STALE_S)
    assert check.ok is ready
    assert detail in check.detail



def test_the_probes_import_no_io_library() -> None:
    tree = ast.parse(Path(consumer.health.probes.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "dataclasses"}
