"""Overlapping RAG requests as span records, as the collector's Kafka exporter writes them.

Each request's spans go in two records keyed by its 32-hex trace id (``partition_traces_by_id``):
its first batch (the database spans and the retriever), then the rest (the LLM call, the chain
and the HTTP root), as a batching exporter flushes a request still running and then its end.
``interleave`` orders the records of several requests so that ``in_flight`` of them are open
at once; ``produce_records`` writes them (optionally with explicit timestamps: a backlog);
``SteadyTraffic`` writes them in real time, and ``CommitWatch`` samples how old the group's
committed record is meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from openinference.semconv.trace import (
    MessageAttributes,
    OpenInferenceSpanKindValues,
    SpanAttributes,
)
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from tests.support.otel_spans import KIND, Recorder, otlp_proto, rag_trace

Part = Literal["head", "tail", "late"]
HEAD_SPANS = 3  # rag_trace ends two database spans and the retriever before the LLM call


@dataclass(frozen=True)
class Request:
    """One RAG request's spans, split as an exporter sends them: ``head`` then ``tail``."""

    trace_id: str
    head: tuple[ReadableSpan, ...]  # database spans and the retriever
    tail: tuple[ReadableSpan, ...]  # the LLM call, the chain and the HTTP root

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        """Every span of the request, in end order."""
        return self.head + self.tail

    @property
    def genai_spans(self) -> int:
        """Its spans with an OpenInference kind: what a whole verdict's ``assembly.spans`` is."""
        return sum(1 for span in self.spans if (span.attributes or {}).get(KIND))

    def span(self, name: str) -> ReadableSpan:
        """The request's span called ``name``."""
        return next(span for span in self.spans if span.name == name)


@dataclass(frozen=True)
class SpanRecord:
    """One record: a batch of one trace's spans."""

    trace_id: str
    part: Part
    value: bytes

    @property
    def key(self) -> bytes:
        """The record's key: the trace id in hex, as ``partition_traces_by_id`` keys it."""
        return self.trace_id.encode()


class Requests:
    """Makes RAG requests with the real OTel SDK (one tracer for all: ids stay unique)."""

    def __init__(self, service: str = "rag-api") -> None:
        self._recorder = Recorder(service=service)
        self._made = 0

    def make(self, question: str | None = None) -> Request:
        """One more request; its spans split into head and tail."""
        self._made += 1
        rag_trace(self._recorder.tracer, question or f"Question {self._made}?")
        spans = self._recorder.spans()
        context = spans[0].context
        assert context is not None
        return Request(f"{context.trace_id:032x}", tuple(spans[:HEAD_SPANS]),
                       tuple(spans[HEAD_SPANS:]))

    def many(self, count: int) -> list[Request]:
        """``count`` more requests."""
        return [self.make() for _ in range(count)]

    def late_llm_span(self, request: Request, answer: str = "Also Brian Herbert.") -> SpanRecord:
        """A record with one more LLM call of ``request``, a child of its chain: a late span."""
        chain = request.span("query").context
        assert chain is not None
        parent = NonRecordingSpan(SpanContext(chain.trace_id, chain.span_id, is_remote=True,
                                              trace_flags=TraceFlags(TraceFlags.SAMPLED)))
        message = f"{SpanAttributes.LLM_OUTPUT_MESSAGES}.0."
        question = f"{SpanAttributes.LLM_INPUT_MESSAGES}.0."
        with self._recorder.tracer.start_as_current_span(
            "chat followup", context=otel_trace.set_span_in_context(parent)
        ) as llm:
            llm.set_attributes({
                KIND: OpenInferenceSpanKindValues.LLM.value,
                question + MessageAttributes.MESSAGE_ROLE: "user",
                question + MessageAttributes.MESSAGE_CONTENT: "Who else wrote Dune books?",
                message + MessageAttributes.MESSAGE_ROLE: "assistant",
                message + MessageAttributes.MESSAGE_CONTENT: answer,
            })
        return SpanRecord(request.trace_id, "late", otlp_proto(self._recorder.spans()))


def head(request: Request) -> SpanRecord:
    """The request's first record."""
    return SpanRecord(request.trace_id, "head", otlp_proto(request.head))


def tail(request: Request) -> SpanRecord:
    """The request's second record (with its root)."""
    return SpanRecord(request.trace_id, "tail", otlp_proto(request.tail))


def interleave(requests: Sequence[Request], in_flight: int = 2) -> list[SpanRecord]:
    """The requests' records in order of writing, ``in_flight`` requests open at once."""
    # The first heads, then each request's tail followed by the head of the one
    # ``in_flight`` after it: every trace's range overlaps the next one's.
    records = [head(r) for r in requests[:in_flight]]
    for i, request in enumerate(requests):
        records.append(tail(request))
        if i + in_flight < len(requests):
            records.append(head(requests[i + in_flight]))
    return records


async def produce_records(
    bootstrap: str, topic: str, records: Sequence[SpanRecord],
    *, timestamps_ms: Sequence[int] | None = None,
) -> list[int]:
    """Write the records in order (keyed by trace id); return their offsets."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        sent = []
        for i, record in enumerate(records):
            stamp = None if timestamps_ms is None else timestamps_ms[i]
            sent.append(await producer.send(topic, record.value, key=record.key,
                                            timestamp_ms=stamp))
        return [(await delivery).offset for delivery in sent]
    finally:
        await producer.stop()


def spread_ms(count: int, span_s: float, end_ms: int | None = None) -> list[int]:
    """``count`` timestamps evenly over the ``span_s`` seconds ending at ``end_ms`` (now)."""
    end = int(time.time() * 1000) if end_ms is None else end_ms
    step = span_s * 1000 / max(1, count - 1)
    return [int(end - span_s * 1000 + i * step) for i in range(count)]


@dataclass
class SteadyTraffic:
    """Writes overlapping requests in real time, a record every ``interval_s``, until ``stop``."""

    bootstrap: str
    topic: str
    interval_s: float = 0.04
    # A request every two records, ``in_flight`` of them open at once; ``stop`` writes the
    # tails of those still open, so every request begun is whole on the topic.
    in_flight: int = 2
    requests: list[Request] = field(default_factory=list)
    sent_at: dict[int, float] = field(default_factory=dict)  # offset -> monotonic, when acked
    tail_sent_at: dict[str, float] = field(default_factory=dict)  # trace id -> monotonic
    stopped_at: float | None = None
    _factory: Requests = field(default_factory=Requests)
    _producer: AIOKafkaProducer | None = None
    _task: asyncio.Task[None] | None = None
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)

    async def __aenter__(self) -> SteadyTraffic:
        self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap,
                                          enable_idempotence=True)
        await self._producer.start()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._producer is not None:
            await self._producer.stop()

    async def stop(self) -> None:
        """Begin no more requests; write the tails of those open; return once all are sent."""
        self._stopping.set()
        assert self._task is not None
        await self._task
        self.stopped_at = time.monotonic()

    @property
    def trace_ids(self) -> set[str]:
        """Every request begun so far."""
        return {r.trace_id for r in self.requests}

    async def _send(self, record: SpanRecord) -> None:
        assert self._producer is not None
        delivery = await self._producer.send(self.topic, record.value, key=record.key)
        offset = (await delivery).offset
        now = time.monotonic()
        self.sent_at[offset] = now
        if record.part == "tail":
            self.tail_sent_at[record.trace_id] = now

    async def _run(self) -> None:
        open_requests: list[Request] = []
        for record in self._records(open_requests):
            started = time.monotonic()
            await self._send(record)
            if not self._stopping.is_set():
                await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))

    def _records(self, open_requests: list[Request]) -> Iterator[SpanRecord]:
        """Heads until ``in_flight`` are open, then a tail and a head in turn; then tails."""
        while not self._stopping.is_set():
            if len(open_requests) < self.in_flight:
                request = self._factory.make()
                self.requests.append(request)
                open_requests.append(request)
                yield head(request)
            else:
                yield tail(open_requests.pop(0))
        while open_requests:
            yield tail(open_requests.pop(0))


@dataclass
class CommitSample:
    """The group's committed offset and the partition's end at one moment."""

    at: float  # monotonic
    committed: int
    end: int


class CommitWatch:
    """Samples a group's committed offset and a partition's end every ``every_s``."""

    def __init__(self, bootstrap: str, group: str, topic: str, partition: int = 0,
                 every_s: float = 1.0) -> None:
        # A consumer of the group's id that never subscribes, so it never joins the group.
        self._consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                          enable_auto_commit=False)
        self._tp = TopicPartition(topic, partition)
        self._every_s = every_s
        self.samples: list[CommitSample] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> CommitWatch:
        await self._consumer.start()
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._consumer.stop()

    async def _sample(self) -> None:
        while True:
            started = time.monotonic()
            ends = await self._consumer.end_offsets([self._tp])
            committed = await self._consumer.committed(self._tp) or 0
            self.samples.append(CommitSample(started, committed, ends[self._tp]))
            await asyncio.sleep(max(0.0, self._every_s - (time.monotonic() - started)))

    def ages_s(self, sent_at: dict[int, float]) -> list[tuple[float, float]]:
        """(when, age) per sample: seconds since the committed record was written, else 0."""
        # The committed offset is the oldest record not done; all caught up, nothing is old.
        return [(s.at, 0.0 if s.committed >= s.end or s.committed not in sent_at
                 else max(0.0, s.at - sent_at[s.committed])) for s in self.samples]
