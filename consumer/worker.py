"""``groundedness run``: the worker's lifetime, from the pieces ``wiring.py`` builds.

Start order matters: the API key is checked before any Kafka client exists, so a worker
without one consumes nothing (unless ``RULES`` leaves out ``groundedness``: then there is no
judge, and no key is needed). Stop order: the pipeline drains and commits, then the consumer
leaves the group, then the producer flushes, then the verdict events (``VERDICT_EVENTS``) have
a few seconds to be sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import structlog

from consumer import wiring
from consumer.health.monitor import WorkerHealth
from consumer.kafka import compat as aiokafka_compat
from consumer.kafka import copartitioned
from consumer.kafka.clients import quiet_fenced_futures
from consumer.kafka.partitions import RebalanceHandler
from consumer.kafka.source import subscribe
from consumer.kafka.types import KafkaError
from consumer.pipeline.delivery.ownership import PartitionOwnership
from consumer.pipeline.pipeline import Pipeline
from consumer.settings import Settings

if TYPE_CHECKING:
    from consumer.kafka.types import AIOKafkaConsumer

log = structlog.get_logger(__name__)

PRODUCER_STOP_TIMEOUT_S = 5.0


async def run_worker(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Run until ``stop`` is set, then drain and return; without ``stop``, until SIGTERM."""
    # Raises ConfigError without an API key, when groundedness is among the rules.
    judge = wiring.make_judge(settings) if settings.judging else None
    spend = wiring.make_budget(settings)  # JUDGE_BUDGET_USD_PER_DAY: the fleet's, today
    rules = wiring.make_rules(settings, judge, budget=spend[0] if spend else None)
    if stop is None:
        stop = asyncio.Event()
        wiring.install_signal_handlers(stop)
    aiokafka_compat.install()
    consumer = wiring.create_consumer(settings)
    delivery = wiring.delivery(settings, consumer)
    producer, transactions = delivery.producer, delivery.transactions
    config = wiring.pipeline_config(settings)
    events = wiring.verdict_events(settings)  # VERDICT_EVENTS: None unless otlp
    sink = wiring.with_events(delivery.sink, events)
    pipeline = Pipeline(
        consumer, sink, rules, delivery.commit, config,
        # Exactly once, ownership reads the progress after fencing (its step 2).
        read_progress=wiring.progress_reader(consumer) if transactions is None else None,
        read_to_end=lambda tp: aiokafka_compat.read_to_end(consumer, tp),
    )
    rebalance: RebalanceHandler = pipeline  # at least once: partitions move straight to it
    ownership: PartitionOwnership | None = None
    if transactions is not None:
        rebalance = ownership = PartitionOwnership(
            consumer, transactions, pipeline, stop, wiring.committed_progress(consumer))
    health = WorkerHealth(consumer, pipeline, stop, waiting=ownership)
    # Every client shares the consumer's token provider: a revoked secret stops the worker.
    oauth_refusal = wiring.OAuthRefusalStop(consumer, stop)
    topics = [settings.traces_topic, *filter(None, [settings.otlp_logs_topic])]
    counts = copartitioned.CountWatch(consumer, topics, stop) if len(topics) > 1 else None
    log.info(
        "worker_starting",
        topic=settings.traces_topic,
        logs_topic=settings.otlp_logs_topic,
        group=settings.consumer_group,
        rules=",".join(rules.names),
        judge_model=settings.judge_model if judge is not None else None,
        delivery=settings.delivery,
        traces_format=settings.traces_format,
        max_in_flight=config.max_in_flight,
    )
    # Meanwhile, Kafka connects.
    preflights = [asyncio.create_task(judge.preflight())] if judge is not None else []
    restore_handler = quiet_fenced_futures(asyncio.get_running_loop())
    following: asyncio.Task[None] | None = None
    try:
        await health.start(settings.health_port)
        if producer is not None and not await wiring.start(producer, settings, "producer", stop):
            return
        if not await wiring.start(consumer, settings, "consumer", stop):
            return
        if spend is not None:  # the day's spend known before the first call
            if not await wiring.start(spend[1].reader, settings, "budget reader", stop):
                return
            if not await spend[1].catch_up(stop):
                return
            following = asyncio.create_task(spend[1].follow(stop))
        if counts is not None:  # before joining: a group dealt such topics splits traces
            if not await copartitioned.wait_for(consumer, topics, stop):
                return
            await copartitioned.check(consumer, topics)
        subscribe(consumer, topics, rebalance,
                  observers=[health] if counts is None else [health, counts])
        await pipeline.run(stop)
    finally:
        await health.close()
        if following is not None:
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)
        if spend is not None:
            await spend[1].close()
        if ownership is not None:
            await ownership.close()  # before the consumer: its stop waits for rebalances
        await _stop_consumer(consumer)
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
        if events is not None:
            await events.close()  # bounded: what is still queued then is counted dropped
        for preflight in preflights:
            preflight.cancel()
        await asyncio.gather(*preflights, return_exceptions=True)
        await rules.close()
        restore_handler()
        oauth_refusal.close()
        log.info("worker_stopped")
        for refusal in (oauth_refusal.error, counts.error if counts is not None else None):
            if refusal is not None:  # however the run ended: it is why
                raise refusal  # one line on stderr, exit code 2


async def _stop_consumer(consumer: AIOKafkaConsumer) -> None:
    try:
        with contextlib.suppress(KafkaError):
            await consumer.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # this task was cancelled: not ours to swallow
        # aiokafka 0.14: Fetcher.close() awaits the fetch tasks it cancels, and one caught
        # in its retry sleep (the broker gone, or the token refused) re-raises that
        # CancelledError into stop(), which then never closes its client: its connections
        # and metadata sync task would outlive the consumer. Closed here instead, bounded.
        # Seen when a revoked OAuth secret stops the worker.
        log.info("consumer_stop_interrupted_by_aiokafka")
        await aiokafka_compat.close_client(consumer)
