"""The broker watch over a fake consumer: what it records of the broker's answers, the lag."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import structlog

from consumer.health.broker_watch import BrokerWatch
from consumer.ops import metrics
from tests.unit.health.fakes import TP, FakeConsumer, FakePipeline

pytestmark = pytest.mark.usefixtures("default_structlog")


def lag(topic: str, partition: int) -> float | None:
    return metrics.REGISTRY.get_sample_value(
        "groundedness_consumer_lag", {"topic": topic, "partition": str(partition)})


def make_watch(consumer: FakeConsumer, pipeline: FakePipeline | None = None) -> BrokerWatch:
    return BrokerWatch(consumer, pipeline or FakePipeline(time.monotonic()),
                       check_interval_s=0.05, check_timeout_s=0.2)


def test_an_answer_is_stale_after_two_check_periods() -> None:
    watch = BrokerWatch(FakeConsumer(), FakePipeline(), check_interval_s=5, check_timeout_s=3)
    assert watch.stale_after_s == 16


async def test_an_answer_stamps_the_time_and_a_failure_says_why_once() -> None:
    consumer = FakeConsumer(broker="down")
    watch = make_watch(consumer)
    with structlog.testing.capture_logs() as logs:
        await watch.check_kafka()
        await watch.check_kafka()
    assert watch.kafka_ok_at is None
    assert watch.kafka_error == (
        "RuntimeError: Unable to get cluster metadata over all known brokers")
    assert [(e["event"], e["log_level"]) for e in logs] == [("kafka_unreachable", "warning")]

    consumer.broker = "up"
    before = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        await watch.check_kafka()
    assert watch.kafka_error is None
    assert watch.kafka_ok_at is not None
    assert watch.kafka_ok_at >= before
    assert [e["event"] for e in logs] == ["kafka_reachable"]


async def test_a_hanging_broker_times_out() -> None:
    watch = make_watch(FakeConsumer(broker="hang"))
    started = time.monotonic()
    await watch.check_kafka()
    assert time.monotonic() - started < 1.0
    assert watch.kafka_error == "TimeoutError: no answer within 0.2 s"


async def test_lag_is_end_minus_position_and_dropped_when_no_longer_owned() -> None:
    topic = f"t-{uuid.uuid4().hex[:6]}"
    tp0, tp1, tp2 = TP(topic, 0), TP(topic, 1), TP(topic, 2)
    consumer = FakeConsumer({tp0, tp1, tp2}, {tp0: 10, tp1: 10, tp2: 3}, {tp0: 4, tp1: 12})
    watch = make_watch(consumer)
    await watch.check_kafka()
    # tp1's position is past the end it was told (read just after): never a negative lag;
    # tp2 has no position yet, so no series
    assert (lag(topic, 0), lag(topic, 1), lag(topic, 2)) == (6, 0, None)

    consumer.assigned = {tp1}
    await watch.check_kafka()
    assert (lag(topic, 0), lag(topic, 1)) == (None, 0)
    watch.forget_lag([(topic, "1")])
    assert lag(topic, 1) is None


async def test_run_checks_only_once_the_consumer_has_started() -> None:
    consumer, pipeline = FakeConsumer(broker="down"), FakePipeline()
    watch = make_watch(consumer, pipeline)
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.sleep(0.3)
        assert watch.kafka_error is None  # never asked: the consumer has not started
        pipeline.last_fetch_at = time.monotonic()
        for _ in range(40):
            if watch.kafka_error is not None:
                break
            await asyncio.sleep(0.05)
        assert watch.kafka_error is not None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
