"""``WorkerHealth``: the probes over a fake consumer whose broker can answer, fail or hang, the
lag it keeps, and the server it starts."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx2
import pytest
import structlog

from consumer.health.monitor import WorkerHealth
from consumer.health.probes import Check
from consumer.ops import metrics
from tests.unit.health.fakes import TP, FakeConsumer, FakePipeline

pytestmark = pytest.mark.usefixtures("default_structlog")


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
    assert health.readiness().detail.startswith("starting")

    pipeline.last_fetch_at = time.monotonic()  # the consumer started
    await health.watch.check_kafka()
    assert health.readiness() == Check(False, "joining the consumer group")
    health.partitions_assigned(set())  # a surplus member: joined, nothing assigned
    assert health.readiness().ok

    tp0, tp1 = TP(topic, 0), TP(topic, 1)
    consumer.assigned = {tp0, tp1}
    consumer.ends = {tp0: 120, tp1: 7}
    consumer.positions = {tp0: 100}  # tp1 has no position yet
    await health.watch.check_kafka()
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
    await health.watch.check_kafka()
    assert (lag(topic, 0), lag(topic, 1)) == (6, 1)

    consumer.assigned = {tp0}
    health.partitions_revoked({tp1})
    assert (lag(topic, 0), lag(topic, 1)) == (6, None)

    consumer.assigned = set()  # revoked without the listener (e.g. a lost membership)
    await health.watch.check_kafka()
    assert lag(topic, 0) is None


@pytest.mark.parametrize("broker", ["down", "hang"])
async def test_an_unanswering_broker_makes_the_worker_unready_with_one_warning(
    broker: str,
) -> None:
    topic = f"t-{uuid.uuid4().hex[:6]}"
    tp = TP(topic, 0)
    consumer = FakeConsumer({tp}, {tp: 5}, {tp: 5})
    health = make_health(consumer, FakePipeline(time.monotonic()))
    health.partitions_assigned({tp})
    await health.watch.check_kafka()
    assert health.readiness().ok

    consumer.broker = broker
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            await health.watch.check_kafka()
    check = health.readiness()
    assert not check.ok
    assert check.detail.startswith("kafka unreachable: ")
    assert ("TimeoutError" if broker == "hang" else "RuntimeError") in check.detail
    assert [e["event"] for e in logs] == ["kafka_unreachable"]  # once, not every check
    assert logs[0]["log_level"] == "warning"
    assert health.liveness().ok

    consumer.broker = "up"
    with structlog.testing.capture_logs() as logs:
        await health.watch.check_kafka()
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
        health.partitions_assigned(set())
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
