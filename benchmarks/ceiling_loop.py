"""The span throughput's ceiling, run: the worker's unavoidable parts in one event loop.

``span_ceiling`` adds up the parts, each measured alone on a quiet machine. This loop does the
same parts for real, over the same topic, against the same judge, measured as the worker is
(``span_scenarios``): so both meet the same machine, the broker serving records and the judge
answering on the other core, which slows the parts (decoding most) against their quiet
figures. Per record: the worker's consumer (``new_consumer``) reads it, ``decode_otlp``
decodes it, and its kept spans wait by trace until the record that carries the trace's root;
that trace is then mapped (``map_trace``), judged by the worker's judge client and
``Evaluator``, and its verdict published by the worker's producer and sink, up to
``JUDGE_MAX_CONCURRENCY`` at a time. A batch is committed once every verdict it completed is
acknowledged, at most every 0.2 s as the worker commits, and the garbage collector is set as
the worker's (``ops/collector.py``).

Nothing else: no closing timer (a trace closes with its root's record, enough for the
benchmark's records, whose judged traces end with their root), no bounds, no watermark held
by open traces, no metrics, no logs, no rule but groundedness. What the worker spends over
this loop is what those cost it. At its stop the loop prints what decoding cost it a record
(``decode_ms_in_loop``), to set beside the same decoding measured alone.

    python -m benchmarks.ceiling_loop   # the worker's environment; runs until SIGTERM
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections import deque

from aiokafka import ConsumerRecord, TopicPartition

from consumer.inputs.otlp.decode import decode_otlp
from consumer.judge.client import build_judge
from consumer.judge.prompt import Limits
from consumer.kafka.clients import new_consumer, new_producer
from consumer.ops.collector import tune_collector
from consumer.pipeline.delivery.sink import KafkaVerdictSink, OutcomeTopics
from consumer.pipeline.pipeline import PipelineConfig
from consumer.rules.groundedness.evaluator import Evaluator
from consumer.settings import Settings, load_settings
from consumer.telemetry.conventions import map_trace
from consumer.telemetry.spans import DecodedRecord, Span

COMMIT_INTERVAL_S = PipelineConfig(max_in_flight=1).commit_interval_s  # the worker's default
DECODE_FIGURE = "decode_ms_in_loop"  # printed at the stop: decoding's CPU ms a record here
Offsets = dict[TopicPartition, int]
Pending = deque[tuple[list[asyncio.Task[None]], Offsets]]


def close_with_roots(open_traces: dict[str, list[Span]],
                     decoded: DecodedRecord) -> list[list[Span]]:
    """Add a record's kept spans to their traces in ``open_traces``; take out and return the
    traces whose root came with it (those with kept spans)."""
    for span in decoded.kept:
        open_traces.setdefault(span.trace_id, []).append(span)
    return [spans for trace_id in decoded.roots_seen
            if (spans := open_traces.pop(trace_id, None))]


class CeilingLoop:
    """Read, decode, group by trace, judge and publish; commit what is acknowledged."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._consumer = new_consumer(settings, "ceiling", settings.consumer_group)
        self._producer = new_producer(settings, "ceiling")
        self._sink = KafkaVerdictSink(self._producer, OutcomeTopics(
            verdicts=settings.verdicts_topic, dead_letters=settings.dlq_topic))
        self._judge = build_judge(
            settings.require_api_key(), settings.openai_base_url, settings.judge_model,
            timeout_s=settings.judge_timeout_seconds,
            max_concurrency=settings.judge_max_concurrency,
            requests_per_minute=None, tokens_per_minute=None)
        self._evaluator = Evaluator(self._judge, settings.threshold, Limits())
        self._open: dict[str, list[Span]] = {}  # kept spans by trace, until its root's record
        self._pending: Pending = deque()  # each batch's verdict tasks and its next offsets
        self._committed_at = 0.0
        # What decoding cost here, running among the other parts, against its cost alone.
        self.decode_s = 0.0
        self.decoded = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop``: take batches, judge what they complete, commit what is done."""
        self._consumer.subscribe([self._settings.traces_topic])
        await self._consumer.start()
        await self._producer.start()
        try:
            while not stop.is_set():
                batch = await self._consumer.getmany(timeout_ms=200)
                tasks = [asyncio.create_task(self._verdict(spans))
                         for records in batch.values() for spans in self._closed(records)]
                if batch:
                    self._pending.append(
                        (tasks, {tp: records[-1].offset + 1 for tp, records in batch.items()}))
                if time.monotonic() - self._committed_at >= COMMIT_INTERVAL_S:
                    await self._commit_done()
        finally:
            await self._consumer.stop()
            await self._producer.stop()
            await self._judge.close()

    def _closed(self, records: list[ConsumerRecord[bytes, bytes]]) -> list[list[Span]]:
        """The records decoded, in order; the traces their roots closed."""
        closed = []
        for record in records:
            started = time.thread_time()
            decoded = decode_otlp(record.value or b"", "otlp_proto")
            self.decode_s += time.thread_time() - started
            self.decoded += 1
            closed += close_with_roots(self._open, decoded)
        return closed

    async def _verdict(self, spans: list[Span]) -> None:
        mapped = map_trace(spans)
        if mapped is not None:
            evaluation = await self._evaluator.evaluate(mapped.to_trace_event())
            await self._sink.publish(evaluation.verdict)

    async def _commit_done(self) -> None:
        """Commit the batches, oldest first, whose verdicts are all acknowledged."""
        self._committed_at = time.monotonic()
        offsets: Offsets = {}
        while self._pending and all(task.done() for task in self._pending[0][0]):
            tasks, next_offsets = self._pending.popleft()
            for task in tasks:
                task.result()  # a failure is the benchmark's to see
            offsets |= next_offsets
        if offsets:
            await self._consumer.commit(offsets)


async def _main() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ceiling = CeilingLoop(load_settings())
    tune_collector()  # as ``groundedness run`` does, once everything is imported
    await ceiling.run(stop)
    decode_ms = ceiling.decode_s / max(ceiling.decoded, 1) * 1000
    print(json.dumps({DECODE_FIGURE: round(decode_ms, 4), "records": ceiling.decoded}),
          flush=True)


def decode_figure(log: str) -> float | None:
    """The decoding cost per record the loop printed as it stopped, from its output."""
    for line in reversed(log.splitlines()):
        if DECODE_FIGURE in line:
            return float(json.loads(line)[DECODE_FIGURE])
    return None


def main() -> int:
    """Run the loop until SIGTERM."""
    asyncio.run(_main())
    return 0


if __name__ == "__main__":
    sys.exit(main())
