"""What one core must spend per record of spans, part by part: the span throughput ceiling.

The worker is one process with one event loop: every record it takes costs it the reading
(aiokafka), the decoding (``decode_otlp``: protobuf parse, keep test, kept spans built), and
for the traces it judges, their mapping and the judge call (prompt, the openai client, the
verdict). Each is measured here alone, on the same records, as CPU time of this process, so
what is left of the worker's own time is its pipeline (assembly, tasks, publishing, commits):

    ceiling (records/s) = 1 / (read + decode + judged per record x (map + judge call))

A worker at 0.9 of that spends at most a tenth more than its unavoidable parts.

Publishing each verdict (serialised, produced by the worker's own producer, acknowledged by
the broker) is measured too, as its own part, ``publish``: it is as unavoidable as reading a
record (a verdict not published is no outcome, and its records cannot be committed), but the
ceiling above was first defined without it, so both are reported, the ratio against each:

    ceiling with publishing = 1 / (read + decode + judged per record x (map + judge call
                                   + publish))
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from benchmarks.procs import cpu_ms_per_item
from benchmarks.systems import Bench, start_judge
from consumer.inputs.otlp.decode import decode_otlp
from consumer.judge.client import build_judge
from consumer.judge.prompt import Limits
from consumer.kafka.clients import new_producer
from consumer.pipeline.delivery.sink import KafkaVerdictSink, OutcomeTopics
from consumer.rules.groundedness.evaluator import Evaluator
from consumer.settings import load_settings
from consumer.telemetry.conventions import map_trace
from consumer.telemetry.spans import Span
from schemas.verdict import VerdictEvent


def decode_cost(values: Sequence[bytes], passes: int = 3) -> dict[str, float]:
    """CPU ms per record: the protobuf parse alone, and all of ``decode_otlp``."""
    return {
        "parse_ms": round(cpu_ms_per_item(TracesData.FromString, values, passes), 4),
        "decode_ms": round(cpu_ms_per_item(lambda v: decode_otlp(v, "otlp_proto"), values,
                                            passes), 4),
    }


def traces_of(values: Sequence[bytes]) -> list[tuple[Span, ...]]:
    """The kept spans of ``values`` grouped by trace, as the assembly would close them."""
    by_trace: dict[str, list[Span]] = {}
    for value in values:
        for span in decode_otlp(value, "otlp_proto").kept:
            by_trace.setdefault(span.trace_id, []).append(span)
    return [tuple(spans) for spans in by_trace.values()]


async def judge_path_cost(
    bench: Bench, traces: Sequence[tuple[Span, ...]], *, calls: int, concurrency: int
) -> tuple[dict[str, float], list[VerdictEvent]]:
    """CPU ms per judged trace of mapping it and evaluating it with the worker's own judge
    client against the instant benchmark judge (its server's CPU is its own process's); and
    the verdicts it made, for ``publish_cost``."""
    judge = await start_judge(bench, 0.0)
    client = build_judge("bench-key", judge.url, "bench-judge", timeout_s=30.0,
                         max_concurrency=concurrency, requests_per_minute=None,
                         tokens_per_minute=None)
    evaluator = Evaluator(client, 0.75, Limits())
    candidates = [spans for spans in traces if map_trace(spans) is not None]
    if not candidates:
        raise ValueError("no trace to judge among the records")
    verdicts: list[VerdictEvent] = []

    async def one(index: int) -> None:
        mapped = map_trace(candidates[index % len(candidates)])
        assert mapped is not None
        verdicts.append((await evaluator.evaluate(mapped.to_trace_event())).verdict)

    try:
        await concurrently(one, concurrency * 2, concurrency)  # connections opened
        cpu_s = await concurrently(one, calls, concurrency)
        map_ms = cpu_ms_per_item(map_trace, candidates, 3)
    finally:
        await client.close()
        await judge.stop()
    return {"verdict_ms": round(cpu_s / calls * 1000, 4), "map_ms": round(map_ms, 4)}, verdicts


async def publish_cost(
    bench: Bench, verdicts: Sequence[VerdictEvent], *, calls: int, concurrency: int
) -> dict[str, float]:
    """CPU ms per verdict of publishing it as the worker does: the worker's own producer
    (``new_producer``: idempotent, acks=all, its batching) and sink (serialised, sent, awaited
    until the broker acknowledged it), ``concurrency`` at a time as the closed traces' tasks
    publish, to a topic of its own on the benchmark's broker (whose CPU is its own)."""
    if not verdicts:
        raise ValueError("no verdict to publish")
    topic = await bench.topic("verdicts-publish")
    settings = load_settings(require_threshold=False, kafka_bootstrap_servers=bench.bootstrap)
    producer = new_producer(settings, "bench-publish")
    await producer.start()
    sink = KafkaVerdictSink(producer, OutcomeTopics(verdicts=topic, dead_letters=topic))

    async def one(index: int) -> None:
        await sink.publish(verdicts[index % len(verdicts)])

    try:
        await concurrently(one, concurrency * 2, concurrency)  # connected, metadata known
        cpu_s = await concurrently(one, calls, concurrency)
    finally:
        await producer.stop()
    return {"publish_ms": round(cpu_s / calls * 1000, 4)}


async def concurrently(one: Callable[[int], Awaitable[None]], count: int,
                       concurrency: int) -> float:
    """``one(0)`` .. ``one(count - 1)`` by ``concurrency`` callers; this process's CPU
    seconds for all of them."""
    queue = iter(range(count))

    async def caller() -> None:
        for index in queue:
            await one(index)

    started = time.process_time()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return time.process_time() - started


def ceiling(read_ms: float, decode_ms: float, judged_per_record: float,
            verdict_ms: float, publish_ms: float = 0.0) -> float:
    """Records per second one core can take when it does nothing but these parts
    (``publish_ms``: each verdict's publishing too, when given)."""
    return 1000 / (read_ms + decode_ms + judged_per_record * (verdict_ms + publish_ms))
