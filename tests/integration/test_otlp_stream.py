"""Span topics through the real worker and a real broker: records of OTLP spans from the
real OTel SDK, one trace per record keyed by its hex trace id (as the collector's Kafka
exporter writes them with ``partition_traces_by_id``), RAG traces spread over two records
and mixed with traces that carry no answer; and a SIGTERM in the middle of assembly."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from consumer.localjudge.server import JudgeServer
from tests.support.fake_judge import ScriptedJudge
from tests.support.otel_spans import Recorder, otlp_json, otlp_proto, rag_trace
from tests.support.streams import (
    Topics,
    create_topics,
    group_offsets,
    in_process_worker,
    produce,
    read_all,
    verdicts_by_trace,
)
from tests.support.workers import VerdictCollector, WorkerPool, wait_committed, worker_env

pytestmark = pytest.mark.integration

PARTITIONS = 3
QUIET_S = "0.5"


class Trace:
    """One RAG request's spans (end order: DB, retriever, LLM, chain, then the HTTP root)."""

    def __init__(self, question: str) -> None:
        recorder = Recorder(service="rag-api")
        rag_trace(recorder.tracer, question)
        self.spans: list[ReadableSpan] = recorder.spans()
        context = self.spans[0].context
        assert context is not None
        self.trace_id = f"{context.trace_id:032x}"
        chain = next(span for span in self.spans if span.name == "query").context
        assert chain is not None
        self.answer_span_id = f"{chain.span_id:016x}"


def _no_answer_traces() -> list[list[ReadableSpan]]:
    """An HTTP request with database spans only, and a health check: nothing to judge."""
    recorder = Recorder(service="rag-api")
    with recorder.tracer.start_as_current_span("GET /users"), \
            recorder.tracer.start_as_current_span("SELECT users"):
        pass
    first = recorder.spans()
    with recorder.tracer.start_as_current_span("GET /health"):
        pass
    return [first, recorder.spans()]


def _encode(spans: list[ReadableSpan], encoding: str) -> bytes:
    proto = otlp_proto(spans)
    return proto if encoding == "otlp_proto" else otlp_json(proto)


def _key(spans: list[ReadableSpan]) -> bytes:
    context = spans[0].context
    assert context is not None
    return f"{context.trace_id:032x}".encode()


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
async def test_one_verdict_per_rag_trace_with_its_hex_ids_and_nothing_for_the_rest(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    encoding: str,
) -> None:
    _, server = fake_judge
    topics = Topics.fresh(f"otlp-{encoding}")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    traces = [Trace(f"Question {n}?") for n in range(8)]
    # Every trace in two records (its first spans, then the rest with the root), interleaved
    # with the other traces' records and with traces that carry no GenAI span.
    batches = [t.spans[:3] for t in traces] + _no_answer_traces() + [t.spans[3:] for t in traces]
    await produce(kafka, topics.traces, [_encode(b, encoding) for b in batches],
                  keys=[_key(b) for b in batches])
    env = worker_env(topics.env(kafka), server.url, TRACES_FORMAT=encoding,
                     TRACE_QUIET_SECONDS=QUIET_S, TRACE_MAX_WAIT_SECONDS="30")

    started = time.monotonic()
    async with in_process_worker(env, monkeypatch):
        records = await read_all(kafka, topics.verdicts, at_least=len(traces), timeout_s=60,
                                 settle_s=2.0)
        elapsed = time.monotonic() - started
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 30)

    verdicts = verdicts_by_trace(records)
    print(f"\n{encoding}: {len(traces)} traces over {len(batches)} records -> "
          f"{len(records)} verdicts in {elapsed:.1f} s (quiet {QUIET_S} s)")
    assert set(verdicts) == {t.trace_id for t in traces}
    assert all(len(v) == 1 for v in verdicts.values()), "one verdict per trace"
    for t in traces:
        [verdict] = verdicts[t.trace_id]
        assert verdict["span_id"] == t.answer_span_id
        assert verdict["verdict"] == "pass"
        assert verdict["project_id"] == "rag-api"
        assert verdict["assembly"] == {"spans": 3, "root_seen": True, "closed_by": "quiet",
                                       "capped": 0}
    assert committed == ends, "every record done: nothing left held by an open trace"
    dead = await read_all(kafka, topics.dlq, timeout_s=2)
    assert dead == []


async def test_a_sigterm_mid_assembly_loses_no_trace_and_exactly_once_duplicates_none(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path
) -> None:
    _, server = fake_judge
    topics = Topics.fresh("otlp-restart")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    whole = [Trace(f"Whole {n}?") for n in range(6)]
    halves = [Trace(f"Half {n}?") for n in range(3)]
    # First the whole traces, then the halves without their roots: on every partition the
    # watermark can pass the whole ones and must stop at the first half.
    first = [t.spans for t in whole] + [t.spans[:-1] for t in halves]
    await produce(kafka, topics.traces, [otlp_proto(b) for b in first],
                  keys=[_key(b) for b in first])
    held: dict[int, int] = {}  # partition -> offset of its first half-trace record
    for record in await read_all(kafka, topics.traces, at_least=len(first), timeout_s=30):
        if record.key in {t.trace_id.encode() for t in halves}:
            held[record.partition] = min(held.get(record.partition, record.offset),
                                         record.offset)
    env = worker_env(topics.env(kafka), server.url, TRACES_FORMAT="otlp_proto",
                     DELIVERY="exactly_once", TRACE_QUIET_SECONDS=QUIET_S,
                     TRACE_MAX_WAIT_SECONDS="300")

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        worker = await pool.start(env)
        # The whole traces are judged and committed; every half stays open, holding its
        # partition's watermark at its first record.
        expected = {p: held.get(p, end) for p, end in (await group_offsets(
            kafka, topics.group, topics.traces))[1].items()}
        assert await _committed_to(kafka, topics, expected, timeout_s=60), worker.log()
        assert await worker.terminate() == 0
        stopped = await group_offsets(kafka, topics.group, topics.traces)
        assert stopped[0] == expected, "the drain judged nothing early and committed no further"
        await asyncio.sleep(1.0)
        assert out.trace_ids() == {t.trace_id for t in whole}

        # The roots arrive while no worker runs; the next one reassembles the halves.
        rest = [t.spans[-1:] for t in halves]
        await produce(kafka, topics.traces, [otlp_proto(b) for b in rest],
                      keys=[_key(b) for b in rest])
        second = await pool.start(env, name="after-restart")
        every = {t.trace_id for t in whole + halves}
        assert await out.wait_for(every, timeout_s=60), second.log()
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 30)
        await asyncio.sleep(1.0)
        assert await second.terminate() == 0

    counts = Counter(v["trace_id"] for v in out.verdicts)
    print(f"\nrestart mid-assembly: {len(halves)} open traces over the SIGTERM, "
          f"{len(out.verdicts)} verdicts for {len(every)} traces")
    assert counts == dict.fromkeys(every, 1), "exactly once: no trace lost, none twice"
    assert committed == ends


async def _committed_to(kafka: str, topics: Topics, expected: dict[int, int],
                        timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        committed, _ = await group_offsets(kafka, topics.group, topics.traces)
        if committed == expected:
            return True
        await asyncio.sleep(0.5)
    return False
