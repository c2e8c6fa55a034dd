"""Steady, overlapping RAG span traffic for the soak tests, and what its verdicts must be.

``SpanTraffic`` is an instrumented service in miniature: it starts requests at a fixed rate
and sends each one's spans as the collector's Kafka exporter would, keyed by the hex trace
id, in two records: the retriever's (with the database spans before it) when the request
starts, then the LLM, chain and HTTP root spans a moment later, so several requests are
always in flight and their records interleave on every partition. ``verdict_problems``
checks the verdicts topic against what was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import random
import time
from collections import Counter
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from aiokafka import AIOKafkaProducer
from opentelemetry.sdk.trace import ReadableSpan

from tests.support.otel_spans import KIND, Recorder, otlp_proto, rag_trace


@dataclass(frozen=True, slots=True)
class SpanRequest:
    """One request's two records and how many GenAI spans its trace has."""

    trace_id: str
    first: bytes  # database spans and the retriever
    second: bytes  # the LLM, the chain and the HTTP root
    genai_spans: int  # what a whole trace's verdict says in ``assembly.spans``


def span_request(recorder: Recorder, question: str) -> SpanRequest:
    """A RAG request's spans split after the retriever, as a service exports them in two
    batches (the retriever ends before the LLM call starts)."""
    rag_trace(recorder.tracer, question)
    spans = recorder.spans()
    cut = next(i for i, span in enumerate(spans) if span.name == "retrieve") + 1
    context = spans[0].context
    assert context is not None
    return SpanRequest(f"{context.trace_id:032x}", otlp_proto(spans[:cut]),
                       otlp_proto(spans[cut:]), sum(1 for span in spans if _genai(span)))


def _genai(span: ReadableSpan) -> bool:
    return KIND in (span.attributes or {})


class SpanTraffic:
    """Produces ``rate`` requests a second until stopped; each request's second record
    follows its first after ``gap_s`` (uniform in the range): records interleave."""

    def __init__(self, bootstrap: str, topic: str, *, rate: float = 8.0,
                 gap_s: tuple[float, float] = (0.3, 1.5), seed: int = 11) -> None:
        self._producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                          linger_ms=5)
        self._topic = topic
        self._rate = rate
        self._gap_s = gap_s
        self._random = random.Random(seed)
        self._recorder = Recorder(service="rag-api")
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.requests: dict[str, SpanRequest] = {}
        self.started_at: dict[str, float] = {}  # time.monotonic() of its first record
        self.finished_at: dict[str, float] = {}  # and of its second (the trace is whole)
        self.most_in_flight = 0  # requests with their first record sent and not the second

    async def __aenter__(self) -> SpanTraffic:
        await self._producer.start()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._producer.stop()

    async def stop(self) -> None:
        """Start no more requests; return once every started one is whole (sent)."""
        self._stopping.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        due: list[tuple[float, int, str]] = []  # (when, serial, trace id): second records
        next_start, serial = time.monotonic(), 0
        while not (self._stopping.is_set() and not due):
            now = time.monotonic()
            if not self._stopping.is_set() and now >= next_start:
                request = span_request(self._recorder, f"Question {serial}?")
                self.requests[request.trace_id] = request
                await self._send(request.trace_id, request.first)
                self.started_at[request.trace_id] = time.monotonic()
                heapq.heappush(due, (now + self._random.uniform(*self._gap_s), serial,
                                     request.trace_id))
                next_start += 1 / self._rate
                serial += 1
            while due and due[0][0] <= now:
                _, _, trace_id = heapq.heappop(due)
                await self._send(trace_id, self.requests[trace_id].second)
                self.finished_at[trace_id] = time.monotonic()
            self.most_in_flight = max(self.most_in_flight, len(due))
            waits = [due[0][0] - now] if due else []
            if not self._stopping.is_set():
                waits.append(next_start - now)
            await asyncio.sleep(max(0.0, min(waits, default=0.0)))

    async def _send(self, trace_id: str, value: bytes) -> None:
        # Awaited to the broker's ack: "sent" then means stored, in this order.
        await (await self._producer.send(self._topic, value, key=trace_id.encode()))


def verdict_problems(verdicts: list[dict[str, Any]], traffic: SpanTraffic,
                     duplicates_allowed: int, since: float = 0.0) -> list[str]:
    """What is wrong with the verdicts of ``traffic``'s traces: a trace with none (when its
    request started, in seconds after ``since``), a verdict of an incomplete trace (fewer
    GenAI spans than sent, no root, context from the LLM's input instead of the retriever) or
    an error, a verdict for a trace never sent, and more traces with repeated verdicts than
    ``duplicates_allowed``."""
    problems = []
    per_trace = Counter(v["trace_id"] for v in verdicts)
    missing = set(traffic.requests) - set(per_trace)
    if missing:
        starts = sorted(traffic.started_at[t] - since for t in missing)
        problems.append(f"{len(missing)} of {len(traffic.requests)} traces have no verdict "
                        f"(their requests started {starts[0]:.1f}-{starts[-1]:.1f} s in; "
                        f"e.g. {sorted(missing)[:3]})")
    unknown = set(per_trace) - set(traffic.requests)
    if unknown:
        problems.append(f"{len(unknown)} verdicts for traces never sent")
    incomplete = [v for v in verdicts if v["trace_id"] in traffic.requests
                  and _incomplete(v, traffic.requests[v["trace_id"]])]
    if incomplete:
        shapes = Counter(_shape(v) for v in incomplete)
        problems.append(f"{len(incomplete)} verdicts of incomplete traces "
                        f"({len({v['trace_id'] for v in incomplete})} traces): "
                        + ", ".join(f"{n} x {shape}" for shape, n in shapes.most_common()))
    errors = [v for v in verdicts if v["verdict"] == "error"]
    if errors:
        problems.append(f"{len(errors)} error verdicts (e.g. {errors[0].get('error')})")
    repeated = sum(1 for n in per_trace.values() if n > 1)
    if repeated > duplicates_allowed:
        problems.append(f"{repeated} traces with more than one verdict record "
                        f"({sum(per_trace.values()) - len(per_trace)} extra records), "
                        f"allowed {duplicates_allowed}")
    return problems


def _incomplete(verdict: dict[str, Any], request: SpanRequest) -> bool:
    assembly = verdict.get("assembly") or {}
    return (assembly.get("spans") != request.genai_spans or not assembly.get("root_seen")
            or verdict.get("context_source") != "retrieval")


def _shape(verdict: dict[str, Any]) -> str:
    assembly = verdict.get("assembly") or {}
    return (f"spans={assembly.get('spans')} root_seen={assembly.get('root_seen')} "
            f"closed_by={assembly.get('closed_by')} context_source="
            f"{verdict.get('context_source')} verdict={verdict.get('verdict')}")
