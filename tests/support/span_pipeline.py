"""The pipeline on a span format with in-memory Kafka stand-ins, and SDK spans to feed it."""

from __future__ import annotations

import asyncio
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from consumer.inputs.formats import OTLP_PROTO
from consumer.judge.prompt import Limits
from consumer.pipeline.pipeline import Pipeline, PipelineConfig
from consumer.pipeline.progress import Progress
from consumer.rules.groundedness.evaluator import Evaluator
from consumer.rules.rule_set import RuleSet
from consumer.telemetry.assembly import AssemblyLimits
from tests.support.otel_spans import Recorder, rag_trace
from tests.support.pipeline_fakes import TP, Commits, GatedJudge, ListSink, Rec

ANSWER = "Frank Herbert [1]."  # what rag_trace answers
P0, P1 = TP("spans", 0), TP("spans", 1)


class Consumer:
    """Hands out queued records per partition, honouring pause; records every pause."""

    def __init__(self, assigned: set[TP]) -> None:
        self.assigned = set(assigned)
        self.paused: set[TP] = set()
        self.queued: dict[TP, list[Rec]] = {}
        self.next_offset: dict[TP, int] = {}
        self.ever_paused = False

    def feed(self, tp: TP, *values: bytes, key: bytes | None = None) -> None:
        queue = self.queued.setdefault(tp, [])
        start = self.next_offset.get(tp, 0)
        queue += [Rec(tp.topic, tp.partition, start + i, 0, key, v, [])
                  for i, v in enumerate(values)]
        self.next_offset[tp] = start + len(values)

    async def getmany(self, *partitions: Any, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[Any, list[Any]]:
        for tp, queue in self.queued.items():
            if queue and tp not in self.paused and tp in self.assigned:
                batch = queue[: max_records or 1000]
                del queue[: len(batch)]
                return {tp: batch}
        await asyncio.sleep(timeout_ms / 1000)
        return {}

    def assignment(self) -> set[Any]:
        return set(self.assigned)

    def pause(self, *partitions: Any) -> None:
        self.paused |= set(partitions)
        self.ever_paused = self.ever_paused or bool(partitions)

    def resume(self, *partitions: Any) -> None:
        self.paused -= set(partitions)

    def seek(self, partition: Any, offset: int) -> None:
        raise AssertionError("every partition is handed over before fetching")


class Harness:
    """A running span pipeline; commits are recorded."""

    def __init__(self, assigned: set[TP] | None = None, max_in_flight: int = 64,
                 max_uncommitted: int | None = None,
                 inherited: dict[TP, Progress] | None = None, **limits: Any) -> None:
        """``inherited``: the progress a previous owner committed (read at assignment)."""
        assigned = {P0} if assigned is None else assigned
        self.consumer = Consumer(assigned)
        self.judge = GatedJudge()
        self.sink = ListSink()
        self.commits = Commits()
        assembly = AssemblyLimits(**({"quiet_s": 0.05, "max_wait_s": 30.0} | limits))
        config = PipelineConfig(
            max_in_flight=max_in_flight, max_uncommitted=max_uncommitted, commit_interval_s=0,
            fetch_timeout_ms=5, revoke_timeout_s=0.2, input_format=OTLP_PROTO, assembly=assembly,
        )
        async def read_progress(partitions: Any) -> dict[TP, Progress]:
            return dict(inherited or {})

        self.pipeline = Pipeline(self.consumer, self.sink,
                                 RuleSet.groundedness(Evaluator(self.judge, 0.5, Limits())),
                                 self.commits, config, read_progress=read_progress)
        self.assigned = assigned
        self.stop_event = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def committed(self, tp: TP = P0) -> int | None:
        marks = [c[tp] for c in self.commits if tp in c]
        return marks[-1] if marks else None

    async def start(self) -> None:
        await self.pipeline.on_partitions_assigned(self.assigned)
        self.task = asyncio.create_task(self.pipeline.run(self.stop_event))

    async def stop(self) -> None:
        self.stop_event.set()
        assert self.task is not None
        await asyncio.wait_for(self.task, 5)


def rag_spans(question: str = "Who wrote Dune?") -> list[ReadableSpan]:
    """One RAG request's spans, in end order: 2 DB, retriever, LLM, chain, then the HTTP root."""
    recorder = Recorder()
    rag_trace(recorder.tracer, question)
    return recorder.spans()


def hex_trace_id(spans: list[ReadableSpan]) -> str:
    context = spans[0].context
    assert context is not None
    return f"{context.trace_id:032x}"


def span_id_of(spans: list[ReadableSpan], name: str) -> str:
    context = next(span for span in spans if span.name == name).context
    assert context is not None
    return f"{context.span_id:016x}"
