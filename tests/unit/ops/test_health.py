"""The health server and its liveness / readiness rules, without Kafka.

The rules are pure functions of a ``HealthState`` snapshot; the server is served for real on
loopback; ``WorkerHealth`` runs over a fake consumer whose broker can answer, fail or hang.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx2
import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families

from consumer.errors import ConfigError
from consumer.ops import metrics
from consumer.ops.health import (
    Check,
    HealthServer,
    HealthState,
    WorkerHealth,
    liveness,
    readiness,
)

NOW = 1000.0
WEDGED_S = 60.0
STALE_S = 20.0
HEALTHY = HealthState(last_fetch_at=NOW - 0.1, draining=False, joined=True,
                      kafka_ok_at=NOW - 2, kafka_error=None)


pytestmark = pytest.mark.usefixtures("default_structlog")


# -- the rules ------------------------------------------------------------------------------

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


# -- the HTTP server --------------------------------------------------------------------------

@dataclass
class FixedProbes:
    live: Check = field(default_factory=lambda: Check(True, "ok"))
    ready: Check = field(default_factory=lambda: Check(False, "starting: connecting to Kafka"))

    def liveness(self) -> Check:
        return self.live

    def readiness(self) -> Check:
        return self.ready


@pytest.fixture
async def served() -> AsyncIterator[tuple[FixedProbes, httpx2.AsyncClient]]:
    probes = FixedProbes()
    server = HealthServer(probes)
    port = await server.start(0, host="127.0.0.1")
    async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", trust_env=False,
                                  timeout=5) as client:
        yield probes, client
    await server.close()


async def test_probes_answer_200_or_503_with_the_reason(
    served: tuple[FixedProbes, httpx2.AsyncClient],
) -> None:
    probes, client = served
    live, ready = await client.get("/healthz"), await client.get("/readyz")
    assert (live.status_code, live.text) == (200, "ok\n")
    assert (ready.status_code, ready.text) == (503, "starting: connecting to Kafka\n")

    probes.ready = Check(True, "ready")
    probes.live = Check(False, "fetch loop stuck: no fetch for 75 s")
    live, ready = await client.get("/healthz"), await client.get("/readyz?verbose=1")
    assert (live.status_code, live.text) == (503, "fetch loop stuck: no fetch for 75 s\n")
    assert ready.status_code == 200


async def test_metrics_are_the_prometheus_exposition_of_the_registry(
    served: tuple[FixedProbes, httpx2.AsyncClient],
) -> None:
    _, client = served
    metrics.IN_FLIGHT.set(7)
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    for name in ("groundedness_verdicts", "groundedness_skipped", "groundedness_dead_letters",
                 "groundedness_judge_latency_seconds", "groundedness_judge_tokens",
                 "groundedness_judge_retries", "groundedness_in_flight",
                 "groundedness_consumer_lag", "groundedness_circuit_open"):
        assert name in families, name
    assert families["groundedness_in_flight"].samples[0].value == 7
    verdicts = {s.labels["verdict"] for s in families["groundedness_verdicts"].samples
                if s.name == "groundedness_verdicts_total"}
    assert verdicts == {"pass", "fail", "error"}  # present at 0 before the first verdict

    openmetrics = await client.get(
        "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    assert openmetrics.text.endswith("# EOF\n")


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/", 404, id="root"),
        pytest.param("GET", "/health", 404, id="unknown-path"),
        pytest.param("POST", "/readyz", 405, id="post"),
        pytest.param("DELETE", "/metrics", 405, id="delete"),
    ],
)
async def test_other_requests_are_refused(
    served: tuple[FixedProbes, httpx2.AsyncClient], method: str, path: str, status: int
) -> None:
    _, client = served
    assert (await client.request(method, path)).status_code == status


async def test_head_gets_headers_only(served: tuple[FixedProbes, httpx2.AsyncClient]) -> None:
    _, client = served
    response = await client.head("/healthz")
    assert response.status_code == 200
    assert response.headers["content-length"] == "3"
    assert response.content == b""


async def test_garbage_and_silent_clients_do_not_hurt_the_server(
    served: tuple[FixedProbes, httpx2.AsyncClient],
) -> None:
    _, client = served
    port = client.base_url.port
    assert port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"\x00\xff\r\n\r\n")
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed without an answer
    writer.close()
    await writer.wait_closed()
    _, silent = await asyncio.open_connection("127.0.0.1", port)  # connects, says nothing
    assert (await client.get("/healthz")).status_code == 200
    silent.close()
    await silent.wait_closed()


async def test_a_taken_port_is_a_configuration_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"HEALTH_PORT: port {port} is already in use"):
            await HealthServer(FixedProbes()).start(port, host="127.0.0.1")


# -- WorkerHealth over a fake consumer -------------------------------------------------------

@dataclass(frozen=True)
class TP:
    topic: str
    partition: int


@dataclass
class FakeConsumer:
    """Answers like aiokafka's consumer; ``broker`` is "up", "down" (raises) or "hang"."""

    assigned: set[TP] = field(default_factory=set)
    ends: dict[TP, int] = field(default_factory=dict)
    positions: dict[TP, int] = field(default_factory=dict)
    broker: str = "up"

    def assignment(self) -> set[TP]:
        return set(self.assigned)

    async def _answer(self) -> None:
        if self.broker == "down":
            raise RuntimeError("Unable to get cluster metadata over all known brokers")
        if self.broker == "hang":
            await asyncio.sleep(3600)

    async def end_offsets(self, partitions: list[TP]) -> dict[TP, int]:
        await self._answer()
        return {tp: self.ends[tp] for tp in partitions}

    async def position(self, partition: TP) -> int:
        if partition not in self.positions:
            await asyncio.sleep(3600)  # aiokafka waits for a position being reset
        return self.positions[partition]

    async def topics(self) -> set[str]:
        await self._answer()
        return {"traces"}


@dataclass
class FakePipeline:
    last_fetch_at: float | None = None


class PassThrough:
    """A rebalance handler that records what it was told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, set[Any]]] = []

    async def on_partitions_revoked(self, revoked: set[Any]) -> None:
        self.calls.append(("revoked", revoked))

    async def on_partitions_assigned(self, assigned: set[Any]) -> None:
        self.calls.append(("assigned", assigned))


def lag(topic: str, partition: int) -> float | None:
    return metrics.REGISTRY.get_sample_value(
        "groundedness_consumer_lag", {"topic": topic, "partition": str(partition)})


def make_health(consumer: FakeConsumer, pipeline: FakePipeline,
                stop: asyncio.Event | None = None) -> WorkerHealth:
    return WorkerHealth(consumer, pipeline, stop if stop is not None else asyncio.Event(),
                        check_interval_s=0.05, check_timeout_s=0.2, wedged_after_s=60)


async def test_ready_once_started_joined_and_the_broker_answers() -> None:
    topic = f"t-{uuid.uuid4().hex[:6]}"
    consumer, pipeline, stop = FakeConsumer(), FakePipeline(), asyncio.Event()
    health = make_health(consumer, pipeline, stop)
    handler = PassThrough()
    tracked = health.track(handler)
    assert health.readiness().detail.startswith("starting")

    pipeline.last_fetch_at = time.monotonic()  # the consumer started
    await health.check_kafka()
    assert health.readiness() == Check(False, "joining the consumer group")
    await tracked.on_partitions_assigned(set())  # a surplus member: joined, nothing assigned
    assert handler.calls == [("assigned", set())]
    assert health.readiness().ok

    tp0, tp1 = TP(topic, 0), TP(topic, 1)
    consumer.assigned = {tp0, tp1}
    consumer.ends = {tp0: 120, tp1: 7}
    consumer.positions = {tp0: 100}  # tp1 has no position yet
    await health.check_kafka()
    assert lag(topic, 0) == 20
    assert lag(topic, 1) is None

    stop.set()
    assert health.readiness() == Check(False, "draining")
    assert health.liveness().ok


async def test_lag_series_of_revoked_partitions_are_removed() -> None:
    topic = f"t-{uuid.uuid4().hex[:6]}"
    tp0, tp1 = TP(topic, 0), TP(topic, 1)
    consumer = FakeConsumer({tp0, tp1}, {tp0: 10, tp1: 10}, {tp0: 4, tp1: 9})
    health = make_health(consumer, FakePipeline(time.monotonic()))
    tracked = health.track(PassThrough())
    await health.check_kafka()
    assert (lag(topic, 0), lag(topic, 1)) == (6, 1)

    consumer.assigned = {tp0}
    await tracked.on_partitions_revoked({tp1})
    assert (lag(topic, 0), lag(topic, 1)) == (6, None)

    consumer.assigned = set()  # revoked without the listener (e.g. a lost membership)
    await health.check_kafka()
    assert lag(topic, 0) is None


@pytest.mark.parametrize("broker", ["down", "hang"])
async def test_an_unanswering_broker_makes_the_worker_unready_with_one_warning(
    broker: str,
) -> None:
    topic = f"t-{uuid.uuid4().hex[:6]}"
    tp = TP(topic, 0)
    consumer = FakeConsumer({tp}, {tp: 5}, {tp: 5})
    health = make_health(consumer, FakePipeline(time.monotonic()))
    await health.track(PassThrough()).on_partitions_assigned({tp})
    await health.check_kafka()
    assert health.readiness().ok

    consumer.broker = broker
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            await health.check_kafka()
    check = health.readiness()
    assert not check.ok
    assert check.detail.startswith("kafka unreachable: ")
    assert ("TimeoutError" if broker == "hang" else "RuntimeError") in check.detail
    assert [e["event"] for e in logs] == ["kafka_unreachable"]  # once, not every check
    assert logs[0]["log_level"] == "warning"
    assert health.liveness().ok

    consumer.broker = "up"
    with structlog.testing.capture_logs() as logs:
        await health.check_kafka()
    assert health.readiness().ok
    assert [e["event"] for e in logs] == ["kafka_reachable"]


async def test_the_watch_starts_checking_once_the_pipeline_fetches() -> None:
    consumer, pipeline = FakeConsumer(broker="down"), FakePipeline()
    health = make_health(consumer, pipeline)
    port = await health.start(0)
    try:
        assert port > 0
        await asyncio.sleep(0.3)
        assert health.readiness().detail == "starting: connecting to Kafka"  # not checked yet
        pipeline.last_fetch_at = time.monotonic()
        consumer.broker = "up"
        await health.track(PassThrough()).on_partitions_assigned(set())
        for _ in range(50):
            if health.readiness().ok:
                break
            await asyncio.sleep(0.05)
        assert health.readiness().ok
        async with httpx2.AsyncClient(trust_env=False, timeout=5) as client:
            response = await client.get(f"http://127.0.0.1:{port}/readyz")
        assert (response.status_code, response.text) == (200, "ready\n")
    finally:
        await health.close()
    await health.close()  # idempotent
