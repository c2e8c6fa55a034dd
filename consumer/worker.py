"""Wiring for ``groundedness run``: settings -> judge, producer, consumer -> pipeline.

Start order matters: the API key is checked before any Kafka client exists, so a worker
without one consumes nothing. Stop order: the pipeline drains and commits, then the consumer
leaves the group, then the producer flushes.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Protocol

import structlog
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError

from consumer.evaluate import Evaluator
from consumer.judge.client import OpenAIJudge, build_judge
from consumer.judge.prompt import Limits
from consumer.ops.health import WorkerHealth
from consumer.settings import Settings
from consumer.stream.kafka import client_options, quiet_fenced_futures, start_client
from consumer.stream.ownership import PartitionOwnership
from consumer.stream.pipeline import Pipeline, PipelineConfig
from consumer.stream.sink import KafkaVerdictSink, VerdictSink
from consumer.stream.source import RebalanceHandler, create_consumer, subscribe
from consumer.stream.transactional import TransactionalSink

log = structlog.get_logger(__name__)

PRODUCER_STOP_TIMEOUT_S = 5.0


class Startable(Protocol):
    """A Kafka client that connects on ``start()``."""

    async def start(self) -> None: ...


def make_judge(settings: Settings) -> OpenAIJudge:
    """The judge the settings describe (refuses without ``OPENAI_API_KEY``)."""
    return build_judge(
        settings.require_api_key(),
        settings.openai_base_url,
        settings.judge_model,
        timeout_s=settings.judge_timeout_seconds,
        max_concurrency=settings.judge_max_concurrency,
        requests_per_minute=settings.judge_requests_per_minute,
        tokens_per_minute=settings.judge_tokens_per_minute,
    )


def make_evaluator(settings: Settings, judge: OpenAIJudge | None = None) -> Evaluator:
    """Judge (``make_judge`` unless given), threshold and limits from the settings."""
    limits = Limits(
        max_documents=settings.max_documents,
        max_document_chars=settings.max_document_chars,
        max_output_chars=settings.max_output_chars,
        context_field=settings.context_field,
    )
    return Evaluator(judge or make_judge(settings), settings.threshold, limits,
                     secrets=settings.secrets())


def max_in_flight(settings: Settings) -> int:
    """Records being worked on at once (fetched, outcome not yet acknowledged): enough to keep
    every judge slot busy, and what a SIGTERM drain waits for."""
    return max(64, 4 * settings.judge_max_concurrency)


def max_uncommitted(settings: Settings) -> int:
    """Records between fetch and commit (the memory bound, and what a crash redoes).

    Larger than ``max_in_flight``: a call that hangs until its timeout holds its partition's
    watermark, and every record finished behind it stays uncommitted meanwhile. The window
    must cover about throughput x timeout, or one hung call pauses the worker (measured with
    64 slots, a 0.5 s judge and 1% of calls hanging 10 s: a window of 4 x slots gave 0.19 of
    the hang-free rate, 32 x slots 0.81-0.91). A record waiting in the window cost about
    19 kB of RSS in the benchmark (100 MB at 16 slots, 177 MB at 128), so above some 200
    slots the memory target needs a smaller factor.
    """
    return max(256, 32 * settings.judge_max_concurrency)


def create_producer(settings: Settings, transactional_id: str | None = None) -> AIOKafkaProducer:
    """An idempotent producer (acks=all) for verdicts and dead letters; transactional if asked."""
    return AIOKafkaProducer(
        enable_idempotence=True,
        transactional_id=transactional_id,
        linger_ms=5,
        # aiokafka's 16 kB default holds ~22 verdicts, and one batch per partition is in
        # flight: under load that capped publishing at ~22 verdicts per broker round trip.
        max_batch_size=256 * 1024,
        **client_options(settings, client_id=f"{settings.consumer_group}-producer"),
    )


async def start_with_retry(client: Startable, what: str, stop: asyncio.Event) -> bool:
    """Start a Kafka client, retrying while the broker is unreachable; False if stopped."""
    delay = 1.0
    while not stop.is_set():
        try:
            await start_client(client)  # ConfigError when the broker refuses the login
            return True
        except KafkaConnectionError as exc:
            log.warning("kafka_unreachable", client=what, error=str(exc), retry_in_s=delay)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        delay = min(delay * 2, 30.0)
    return False


def install_signal_handlers(stop: asyncio.Event) -> None:
    """SIGTERM and SIGINT ask for a drain."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _request_stop, stop, sig)


def _request_stop(stop: asyncio.Event, sig: signal.Signals) -> None:
    if not stop.is_set():
        log.info("stop_requested", signal=sig.name)
    stop.set()


class Rebalance:
    """At least once, partitions move straight to and from the pipeline."""

    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._pipeline.on_partitions_revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._pipeline.on_partitions_assigned(assigned)


async def run_worker(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Run until ``stop`` is set, then drain and return; without ``stop``, until SIGTERM."""
    judge = make_judge(settings)  # raises ConfigError without an API key
    evaluator = make_evaluator(settings, judge)
    if stop is None:
        stop = asyncio.Event()
        install_signal_handlers(stop)
    consumer = create_consumer(settings)
    producer: AIOKafkaProducer | None = None
    transactions: TransactionalSink | None = None
    sink: VerdictSink
    if settings.delivery == "exactly_once":
        transactions = TransactionalSink(
            lambda txn_id: create_producer(settings, transactional_id=txn_id),
            settings.consumer_group,
            settings.verdicts_topic,
            settings.dlq_topic,
        )
        sink, commit = transactions, transactions.commit
    else:
        producer = create_producer(settings)
        sink = KafkaVerdictSink(producer, settings.verdicts_topic, settings.dlq_topic)

        async def commit(offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
            await consumer.commit(offsets)
            return offsets

    config = PipelineConfig(
        max_in_flight=max_in_flight(settings),
        max_uncommitted=max_uncommitted(settings),
        drain_timeout_s=settings.drain_timeout_seconds,
    )
    pipeline = Pipeline(consumer, sink, evaluator, commit, config)
    rebalance: RebalanceHandler = Rebalance(pipeline)
    ownership: PartitionOwnership | None = None
    if transactions is not None:
        rebalance = ownership = PartitionOwnership(consumer, transactions, pipeline, stop)
    health = WorkerHealth(consumer, pipeline, stop, waiting=ownership)
    subscribe(consumer, settings.traces_topic, health.track(rebalance))
    log.info(
        "worker_starting",
        topic=settings.traces_topic,
        group=settings.consumer_group,
        judge_model=settings.judge_model,
        delivery=settings.delivery,
        max_in_flight=config.max_in_flight,
    )
    preflight = asyncio.create_task(judge.preflight())  # meanwhile, Kafka connects
    restore_handler = quiet_fenced_futures(asyncio.get_running_loop())
    try:
        await health.start(settings.health_port)
        if producer is not None and not await start_with_retry(producer, "producer", stop):
            return
        if not await start_with_retry(consumer, "consumer", stop):
            return
        await pipeline.run(stop)
    finally:
        await health.close()
        if ownership is not None:
            await ownership.close()  # before the consumer: its stop waits for rebalances
        with contextlib.suppress(KafkaError):
            await consumer.stop()
        if producer is not None:
            # Bounded: after the drain, whatever the producer still holds belongs to records
            # whose offsets were not committed (redelivered anyway), and with the broker away
            # stop() would retry those sends for ~30 s, past the pod's grace period.
            with contextlib.suppress(KafkaError):
                try:
                    await asyncio.wait_for(producer.stop(), PRODUCER_STOP_TIMEOUT_S)
                except TimeoutError:
                    log.warning("producer_stop_timed_out", timeout_s=PRODUCER_STOP_TIMEOUT_S)
        if transactions is not None:
            await transactions.close()
        preflight.cancel()
        await asyncio.gather(preflight, return_exceptions=True)
        await judge.close()
        restore_handler()
        log.info("worker_stopped")
