"""What one core must spend per record of spans, part by part: the span throughput ceiling.

The worker is one process with one event loop: every record it takes costs it the reading
(aiokafka), the decoding (``decode_otlp``: protobuf parse, keep test, kept spans built), and
for the traces it judges, their mapping and the judge call (prompt, the openai client, the
verdict). Each is measured here alone, on the same records, as CPU time of this process, so
what is left of the worker's own time is its pipeline (assembly, tasks, publishing, commits):

    ceiling (records/s) = 1 / (read + decode + judged per record x (map + judge call))

A worker at 0.9 of that spends at most a tenth more than its unavoidable parts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from benchmarks.procs import cpu_ms_per_item
from benchmarks.systems import Bench, start_judge
from consumer.evaluate import Evaluator
from consumer.judge.client import build_judge
from consumer.judge.prompt import Limits
from consumer.telemetry.conventions import map_trace
from consumer.telemetry.otlp import decode_otlp
from consumer.telemetry.spans import Span


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
) -> dict[str, float]:
    """CPU ms per judged trace of mapping it and evaluating it with the worker's own judge
    client against the instant benchmark judge (its server's CPU is its own process's)."""
    judge = await start_judge(bench, 0.0)
    client = build_judge("bench-key", judge.url, "bench-judge", timeout_s=30.0,
                         max_concurrency=concurrency, requests_per_minute=None,
                         tokens_per_minute=None)
    evaluator = Evaluator(client, 0.75, Limits())
    candidates = [spans for spans in traces if map_trace(spans) is not None]
    if not candidates:
        raise ValueError("no trace to judge among the records")

    async def one(index: int) -> None:
        mapped = map_trace(candidates[index % len(candidates)])
        assert mapped is not None
        await evaluator.evaluate(mapped.to_trace_event())

    async def run(count: int) -> float:
        queue = iter(range(count))

        async def caller() -> None:
            for index in queue:
                await one(index)

        started = time.process_time()
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        return time.process_time() - started

    try:
        await run(concurrency * 2)  # connections opened, first calls settled
        cpu_s = await run(calls)
        map_ms = cpu_ms_per_item(map_trace, candidates, 3)
    finally:
        await client.close()
        await judge.stop()
    return {"verdict_ms": round(cpu_s / calls * 1000, 4), "map_ms": round(map_ms, 4)}


def ceiling(read_ms: float, decode_ms: float, judged_per_record: float,
            verdict_ms: float) -> float:
    """Records per second one core can take when it does nothing but these parts."""
    return 1000 / (read_ms + decode_ms + judged_per_record * verdict_ms)
