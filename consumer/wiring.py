"""The one composition root: settings -> judge, evaluator, rules, limits, pipeline config,
Kafka clients and the verdict sink.

Every command builds what it needs here (``run`` in ``worker.py``, ``replay``, ``check`` and
``eval``, ``load-sample``); nothing else turns settings into objects. Kafka clients start
through ``start`` (``kafka.clients.start_client``: one failure map for all of them).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from consumer.cost.daily_budget import DailyBudget
from consumer.cost.judge_cache import JudgeCache
from consumer.cost.pricing import Prices
from consumer.errors import ConfigError
from consumer.inputs.formats import SpanFormat, input_format
from consumer.judge.client import OpenAIJudge, build_judge
from consumer.judge.prompt import Limits
from consumer.judge.result import Judge
from consumer.kafka import compat as aiokafka_compat
from consumer.kafka.auth.oauth import CachedTokenProvider, OAuthTokenRefused
from consumer.kafka.clients import (
    REVOKE_TIMEOUT_S,
    Startable,
    new_consumer,
    new_producer,
    start_client,
)
from consumer.kafka.errors import Refuse, map_kafka_error
from consumer.kafka.partitions import Partition
from consumer.kafka.types import KafkaError
from consumer.ops import metrics
from consumer.pipeline.delivery.sink import KafkaVerdictSink, OutcomeTopics, VerdictSink
from consumer.pipeline.delivery.transactional import TransactionalSink
from consumer.pipeline.fleet_spend import FleetSpend
from consumer.pipeline.pipeline import Commit, PipelineConfig
from consumer.pipeline.progress import Commitment, Progress, decode
from consumer.rules.base import DeterministicRule, JudgedRule
from consumer.rules.groundedness.evaluator import Evaluator
from consumer.rules.groundedness.rule import Groundedness
from consumer.rules.registry import GROUNDEDNESS, RuleOptions, build_rules
from consumer.rules.rule_set import RuleSet
from consumer.settings import Settings
from consumer.telemetry.assembly import AssemblyLimits

if TYPE_CHECKING:  # the classes only: their constructors are in kafka/clients.py
    from consumer.kafka.types import AIOKafkaConsumer, AIOKafkaProducer
    from consumer.pipeline.delivery.events.sink import Emitter, VerdictEvents

log = structlog.get_logger(__name__)


# -- the judge --------------------------------------------------------------------------------


def limits(settings: Settings) -> Limits:
    """What of a trace reaches the judge: documents, their length, the output's length."""
    return Limits(
        max_documents=settings.max_documents,
        max_document_chars=settings.max_document_chars,
        max_output_chars=settings.max_output_chars,
        context_field=settings.context_field,
    )


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


def make_evaluator(settings: Settings, judge: Judge | None = None,
                   budget: DailyBudget | None = None) -> Evaluator:
    """Judge (``make_judge`` unless given), threshold, limits, answer cache and prices from
    the settings; ``budget``: the worker's daily one (``make_budget``)."""
    return Evaluator(judge or make_judge(settings), settings.threshold, limits(settings),
                     secrets=settings.secrets(), cache=JudgeCache(settings.judge_cache_size),
                     prices=prices(settings), budget=budget)


def make_budget(settings: Settings) -> tuple[DailyBudget, FleetSpend] | None:
    """``JUDGE_BUDGET_USD_PER_DAY``, when set and the judge runs: the budget, and the reader
    of ``VERDICTS_TOPIC`` that tells it the fleet's spend today (outside any group)."""
    cap = settings.judge_budget_usd_per_day
    if cap is None or not settings.judging:
        return None
    budget = DailyBudget(cap, settings.judge_max_concurrency)
    # Uncommitted records too: an open transaction must not hide the fleet's spend.
    reader = new_consumer(settings, f"{settings.consumer_group}-budget", None,
                          committed_only=False)
    return budget, FleetSpend(reader, settings.verdicts_topic, budget)


def prices(settings: Settings) -> Prices | None:
    """``JUDGE_PRICE_*_PER_MILLION``, when set (both are, or neither)."""
    given = settings.judge_price_input_per_million, settings.judge_price_output_per_million
    if given[0] is None or given[1] is None:
        return None
    return Prices(given[0], given[1], settings.judge_price_cached_input_per_million)


def make_rules(settings: Settings, judge: Judge | None = None, *,
               names: Sequence[str] | None = None, select: bool = True,
               budget: DailyBudget | None = None) -> RuleSet:
    """The rules of ``RULES`` (or ``names``), in order: with ``groundedness``, the evaluator
    (``make_judge`` unless given: refuses without ``OPENAI_API_KEY``); without it, no judge
    and no key. ``select``: each rule's filter and sample rate choose the traces it looks at
    (``Settings.selection``; ``eval`` measures every labelled row, so it does not select)."""
    names = tuple(settings.rules if names is None else names)
    options = RuleOptions(citation_pattern=settings.citation_pattern,
                          secrets=tuple(settings.secrets()))
    checks = {rule.name: rule for rule in build_rules(names, options)}
    rules: list[JudgedRule | DeterministicRule] = [
        Groundedness(make_evaluator(settings, judge, budget)) if name == GROUNDEDNESS
        else checks[name]
        for name in names
    ]
    metrics.expect_rules(names)
    metrics.PROJECTS.limit = settings.metrics_max_projects
    if not select:
        return RuleSet(rules, settings.secrets())
    return RuleSet(rules, settings.secrets(),
                   selections={name: settings.selection(name) for name in names})


# -- the pipeline -----------------------------------------------------------------------------


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


def max_uncommitted_spans(settings: Settings) -> int:
    """The window for span formats: there the watermark waits behind the oldest open trace's
    first record (up to ``TRACE_MAX_WAIT_SECONDS`` of the records' time); every record after
    it stays below the next commit meanwhile, though done (the commit's progress says so)
    and holding no memory but its offset (about 120 bytes of bookkeeping). So the window is
    wide, or a few slow traces would pause the worker; when it fills with nothing being
    judged, the oldest open trace closes (``closed_by: "capacity"``). The open traces
    themselves are bounded by ``MAX_OPEN_TRACES``."""
    return max(max_uncommitted(settings), 20 * settings.max_open_traces, 100_000)


def assembly_limits(settings: Settings) -> AssemblyLimits:
    """When traces close, and how many may be open (span formats)."""
    return AssemblyLimits(
        quiet_s=settings.trace_quiet_seconds,
        max_wait_s=settings.trace_max_wait_seconds,
        max_open_traces=settings.max_open_traces,
    )


def pipeline_config(settings: Settings) -> PipelineConfig:
    """How much the pipeline holds, how long its drain waits, and for span formats how
    traces are assembled."""
    fmt = input_format(settings.traces_format)
    if not isinstance(fmt, SpanFormat):
        return PipelineConfig(
            max_in_flight=max_in_flight(settings),
            max_uncommitted=max_uncommitted(settings),
            drain_timeout_s=settings.drain_timeout_seconds,
            revoke_timeout_s=REVOKE_TIMEOUT_S,
        )
    return PipelineConfig(
        max_in_flight=max_in_flight(settings),
        max_uncommitted=max_uncommitted_spans(settings),
        drain_timeout_s=settings.drain_timeout_seconds,
        revoke_timeout_s=REVOKE_TIMEOUT_S,
        input_format=fmt,
        logs_topic=settings.otlp_logs_topic,
        assembly=assembly_limits(settings),
    )


# -- Kafka ------------------------------------------------------------------------------------


def create_producer(settings: Settings, transactional_id: str | None = None) -> AIOKafkaProducer:
    """The producer of verdicts and dead letters (transactional when given an id)."""
    return new_producer(settings, f"{settings.consumer_group}-producer", transactional_id)


def create_consumer(settings: Settings) -> AIOKafkaConsumer:
    """The worker's consumer, a member of ``CONSUMER_GROUP`` (with ``OTLP_LOGS_TOPIC``, owning
    the same partition numbers of both topics)."""
    return new_consumer(settings, f"{settings.consumer_group}-consumer", settings.consumer_group,
                        copartitioned=settings.otlp_logs_topic is not None)


def create_reader(settings: Settings) -> AIOKafkaConsumer:
    """Replay's reader, outside any group: its reading never moves a group's offsets."""
    return new_consumer(settings, f"{settings.consumer_group}-replay", None)


def create_verdict_reader(settings: Settings) -> AIOKafkaConsumer:
    """``groundedness verdicts``' reader of ``VERDICTS_TOPIC``, outside any group: it joins
    none, commits nothing, and moves no group's offsets."""
    return new_consumer(settings, f"{settings.consumer_group}-verdicts", None)


@asynccontextmanager
async def running_reader(reader: AIOKafkaConsumer, settings: Settings,
                         what: str) -> AsyncIterator[AIOKafkaConsumer]:
    """A group-less reader (``create_reader``, ``create_verdict_reader``) started for the
    block and stopped after it; a stop that fails is logged, never raised over the block's
    own outcome."""
    try:
        await start(reader, settings, what)
        yield reader
    finally:
        try:
            await reader.stop()
        except KafkaError as exc:
            log.warning("reader_stop_failed", reader=what, error=str(exc))


async def start(
    client: Startable, settings: Settings, what: str, stop: asyncio.Event | None = None
) -> bool:
    """Start a Kafka client (``kafka.clients.start_client``): a refused login is a
    ConfigError; an unreachable broker is retried until ``stop`` if given, else a ConfigError."""
    return await start_client(client, what, bootstrap=settings.kafka_bootstrap_servers,
                              stop=stop)


class OAuthRefusalStop:
    """Stops the worker when the token issuer refuses the client once its token has expired
    (a revoked secret). aiokafka swallows that error in the connections it opens in the
    background and would retry forever; the worker instead drains, then exits with the
    refusal's one line (``error``, a ``ConfigError``: exit code 2)."""

    def __init__(self, client: object, stop: asyncio.Event) -> None:
        self.error: ConfigError | None = None
        self._stop = stop
        provider = aiokafka_compat.oauth_token_provider(client)
        self._unsubscribe = (provider.on_refused_while_running(self._refused)
                             if isinstance(provider, CachedTokenProvider) else None)

    def _refused(self, refused: OAuthTokenRefused) -> None:
        action = map_kafka_error(refused)
        if self.error is None and isinstance(action, Refuse):
            self.error = action.error()
            log.error("kafka_oauth_refused_while_running", error=action.message)
            self._stop.set()

    def close(self) -> None:
        """Stop listening (the provider is shared by every client of the process)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None


@dataclass(frozen=True, slots=True)
class Delivery:
    """Where outcomes go and how offsets commit, for ``DELIVERY``."""

    sink: VerdictSink
    commit: Commit
    producer: AIOKafkaProducer | None  # at least once: one producer, started by the caller
    transactions: TransactionalSink | None  # exactly once: a producer per partition


def delivery(settings: Settings, consumer: AIOKafkaConsumer) -> Delivery:
    """At least once: publish, then commit the consumer's offsets. Exactly once: outcomes and
    offsets in one transaction per input partition."""
    if settings.delivery == "exactly_once":
        transactions = TransactionalSink(
            lambda txn_id: create_producer(settings, transactional_id=txn_id),
            settings.consumer_group,
            outcome_topics(settings),
        )
        return Delivery(transactions, transactions.commit, None, transactions)
    producer = create_producer(settings)

    async def commit(offsets: dict[Partition, Commitment]) -> dict[Partition, Commitment]:
        await consumer.commit(dict(offsets))
        return offsets

    return Delivery(verdict_sink(settings, producer), commit, producer, None)


COMMITTED_READ_TIMEOUT_S = 15.0


ReadProgress = Callable[[Collection[Partition]], Awaitable[dict[Partition, Progress]]]


def committed_progress(consumer: AIOKafkaConsumer) -> ReadProgress:
    """The group's committed offsets of the partitions given, with their progress
    (``pipeline/progress.py``); those never committed are left out. Raises what the
    coordinator raised (exactly once's ownership retries)."""

    async def read(partitions: Collection[Partition]) -> dict[Partition, Progress]:
        committed = await aiokafka_compat.committed_with_metadata(consumer, partitions)
        return {tp: decode(metadata, offset) for tp, (offset, metadata) in committed.items()}

    return read


def progress_reader(consumer: AIOKafkaConsumer) -> ReadProgress:
    """``committed_progress`` for a new owner at least once, bounded: if the coordinator
    does not answer, nothing is skipped (more is redone), and the worker says so."""
    read_committed = committed_progress(consumer)

    async def read(partitions: Collection[Partition]) -> dict[Partition, Progress]:
        try:
            async with asyncio.timeout(COMMITTED_READ_TIMEOUT_S):
                return await read_committed(partitions)
        except Exception as exc:  # any failure only means more is redone
            log.warning("progress_read_failed", error=f"{type(exc).__name__}: {exc}"[:300],
                        detail="the partitions are read again from their committed offsets")
            return {}

    return read


def outcome_topics(settings: Settings) -> OutcomeTopics:
    """``VERDICTS_TOPIC`` and ``DLQ_TOPIC``."""
    return OutcomeTopics(verdicts=settings.verdicts_topic, dead_letters=settings.dlq_topic)


def verdict_sink(settings: Settings, producer: AIOKafkaProducer) -> KafkaVerdictSink:
    """Verdicts and dead letters through one idempotent producer (at least once)."""
    return KafkaVerdictSink(producer, outcome_topics(settings))


def verdict_events(settings: Settings) -> VerdictEvents | None:
    """``VERDICT_EVENTS``: None for ``none``; for ``otlp``, each verdict's event through the
    OTel SDK's OTLP exporter, which reads the standard ``OTEL_EXPORTER_OTLP_*`` variables."""
    if settings.verdict_events == "none":
        return None
    from consumer.pipeline.delivery.events.sink import (
        otlp_events,  # the OTel SDK only for a worker that sends
    )

    return otlp_events()


def with_events(sink: VerdictSink, events: Emitter | None) -> VerdictSink:
    """``sink``, emitting each verdict's event once the verdict is on its topic when there
    are events: acknowledged (at least once) or its transaction committed (exactly once)."""
    if events is None:
        return sink
    from consumer.pipeline.delivery.events.sink import EventingSink

    return EventingSink(sink, events)


# -- the process ------------------------------------------------------------------------------


def install_signal_handlers(stop: asyncio.Event) -> None:
    """SIGTERM and SIGINT ask for a drain."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _request_stop, stop, sig)


def _request_stop(stop: asyncio.Event, sig: signal.Signals) -> None:
    if not stop.is_set():
        log.info("stop_requested", signal=sig.name)
    stop.set()
