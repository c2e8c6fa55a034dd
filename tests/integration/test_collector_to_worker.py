"""End to end on spans: the OTel SDK -> the real OpenTelemetry Collector -> the real broker ->
the real worker (``groundedness run``, a subprocess) -> verdicts; in both encodings. And the
same service as the OTel GenAI instrumentation traces it, its content in log records through
the collector's logs pipeline to a logs topic the worker reads beside the spans.

The service is the demo's instrumented RAG service (``scripts/rag_spans.py``): it builds its
index (splitter and embedding traces: GenAI spans, nothing answered), answers requests (an
HTTP root, CHAIN, RETRIEVER with documents, LLM, and database and HTTP client spans), and
serves health checks and plain API calls (HTTP and database spans only), all sent with the
SDK's ``OTLPSpanExporter`` over OTLP/HTTP to ``scripts/otel-collector``, whose Kafka exporter
writes one trace per record (``partition_traces_by_id: true``). The fake judge scores each
answer by its marker. Expected: one verdict per answered request, with the hex trace id, the
CHAIN span as the answer's span, the retriever's documents as the judge's context, closed by
quiet with its root seen; nothing for the empty answer, the index build or the plain traffic.
Skipped only where the collector can be neither built (no ``go``) nor found cached.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from consumer.judge.prompt import read_data
from consumer.localjudge.server import JudgeServer
from scripts import local_collector, log_transport
from scripts.kafka import broker
from scripts.openai_v2_spans import INSTRUMENTATION_SCOPE, OpenAIv2Service
from scripts.rag_spans import (
    PROJECT_NAME,
    EmittedTraffic,
    RagRequest,
    RetrievedDocument,
    emit_traffic,
    resource,
)
from scripts.span_transport import SpanEncoding, to_collector
from tests.support import collector
from tests.support.fake_judge import PROBE, ScriptedJudge
from tests.support.streams import Topics, create_topics, read_all, verdicts_by_trace
from tests.support.workers import WorkerPool, tracebacks, wait_committed, worker_env

pytestmark = pytest.mark.integration

ENCODINGS: list[SpanEncoding] = ["otlp_proto", "otlp_json"]
PARTITIONS = 3
QUIET_S = "0.5"  # as short as assembly allows here: the test waits for it once per trace
DUNE = (RetrievedDocument("doc-dune", "Dune is a science fiction novel by Frank Herbert."),
        RetrievedDocument("doc-1965", "Dune was first published in 1965."))
PARIS = (RetrievedDocument("doc-paris", "Paris is the capital of France."),)
REQUESTS = [
    RagRequest("grounded", "Who wrote Dune?", DUNE, "Frank Herbert wrote Dune."),
    RagRequest("ungrounded", "When was Dune published?", DUNE,
               "Dune was published in 1990. [[score=1]]"),
    RagRequest("partial", "What is the capital of France?", PARIS,
               "Paris, a city of 20 million. [[score=3]]"),
    RagRequest("no-documents", "Say hello.", (), "Hello! [[score=4]]"),
    RagRequest("empty", "Who wrote Dune?", DUNE, ""),  # skipped: no verdict
    RagRequest("grounded-2", "Which city is the capital of France?", PARIS,
               "The capital of France is Paris."),
]
EXPECTED = {"grounded": "pass", "ungrounded": "fail", "partial": "pass",
            "no-documents": "pass", "grounded-2": "pass"}


@pytest.fixture(scope="module")
def collector_build() -> None:
    """The collector binary, built once (minutes on a cold Go module cache) or found cached."""
    collector.available()


class Sent:
    """What the service sent: its traces, and every span as the SDK recorded it."""

    def __init__(self, traffic: EmittedTraffic, spans: list[ReadableSpan]) -> None:
        self.traffic = traffic
        self.spans = spans

    def by_request(self) -> dict[str, str]:
        """Request id -> its hex trace id."""
        return {t.request.request_id: t.trace_id for t in self.traffic.answered}

    def chain_span_id(self, trace_id: str) -> str:
        """The CHAIN span of a trace, 16 hex, as the SDK recorded it."""
        [chain] = [
            span for span in self.spans
            if span.context is not None and f"{span.context.trace_id:032x}" == trace_id
            and (span.attributes or {}).get(SpanAttributes.OPENINFERENCE_SPAN_KIND)
            == OpenInferenceSpanKindValues.CHAIN.value
        ]
        assert chain.context is not None
        return f"{chain.context.span_id:016x}"


def send_through(endpoint: str) -> Sent:
    """The service's traffic over OTLP/HTTP to the collector; blocks until exported."""
    route = to_collector(endpoint, resource())
    recorded = InMemorySpanExporter()
    route.provider.add_span_processor(SimpleSpanProcessor(recorded))
    traffic = emit_traffic(route.tracer, REQUESTS, plain_every=2)
    route.flush()  # raises unless every span reached the collector
    return Sent(traffic, list(recorded.get_finished_spans()))


@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_spans_through_the_collector_get_one_verdict_per_answered_request(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], collector_build: None,
    tmp_path: Path, encoding: SpanEncoding,
) -> None:
    judge, server = fake_judge
    topics = Topics.fresh(f"collector-{encoding}")
    # Created before the first span: the exporter would otherwise auto-create it.
    await create_topics(kafka, topics, partitions=PARTITIONS)
    env = worker_env(topics.env(kafka), server.url, TRACES_FORMAT=encoding,
                     TRACE_QUIET_SECONDS=QUIET_S, TRACE_MAX_WAIT_SECONDS="30")

    with local_collector.running(kafka, topics.traces, encoding) as running:
        async with WorkerPool(tmp_path) as pool:
            # The worker is up first: spans arrive while it runs, as in production.
            worker = await pool.start(env)
            sent = await asyncio.to_thread(send_through, running.endpoint)
            ids = sent.by_request()
            records = await read_all(kafka, topics.verdicts, at_least=len(EXPECTED),
                                     timeout_s=60)
            # Every record done, the index build and the plain traffic included: anything
            # they were to publish is published by now.
            committed, ends = await wait_committed(kafka, topics.group, topics.traces, 30)
            assert await worker.terminate() == 0
    records = await read_all(kafka, topics.verdicts, at_least=len(records), timeout_s=10,
                             settle_s=0.5)

    verdicts = verdicts_by_trace(records)
    assert set(verdicts) == {ids[name] for name in EXPECTED}, worker.log()
    assert not set(verdicts) & set(sent.traffic.other_trace_ids), "index build or plain traffic"
    assert sum(map(len, verdicts.values())) == len(EXPECTED), "one verdict per trace"
    for name, outcome in EXPECTED.items():
        [verdict] = verdicts[ids[name]]
        assert verdict["verdict"] == outcome, name
        assert verdict["trace_id"] == ids[name]
        assert len(verdict["trace_id"]) == 32
        assert verdict["span_id"] == sent.chain_span_id(ids[name]), name
        assert verdict["assembly"] == {"spans": 3, "root_seen": True, "closed_by": "quiet",
                                       "capped": 0}
        assert verdict["project_id"] == PROJECT_NAME
        assert verdict["session_id"] == f"session-{name}"
    assert committed == ends, "nothing left held by an open trace"
    assert await read_all(kafka, topics.dlq, timeout_s=1) == []
    assert tracebacks(worker.log()) == []

    # The judge saw each request's documents as the context, in the retriever's order; a
    # request that retrieved nothing was judged on its LLM call's prompt.
    judged = [read_data(call.request["messages"]) for call in judge.calls
              if call.answer != PROBE]
    assert sorted(data["answer"] for data in judged) == sorted(
        r.answer for r in REQUESTS if r.answer)
    for request in REQUESTS:
        if not request.answer:
            continue
        [data] = [data for data in judged if data["answer"] == request.answer]
        contents = [doc["content"] for doc in data["documents"]]
        if request.documents:
            assert contents == [doc.content for doc in request.documents], request.request_id
            assert verdicts[ids[request.request_id]][0]["context_source"] == "retrieval"
        else:
            assert request.question in contents[-1]
            assert verdicts[ids[request.request_id]][0]["context_source"] == "llm_input"


# ---------------------------------------------------------------------------- openai-v2


def send_openai_v2_through(endpoint: str) -> EmittedTraffic:
    """The service as the OTel GenAI instrumentation traces it (the demo's ``openai-v2``):
    spans over OTLP/HTTP, and the messages as log records to the same collector."""
    spans, logs = to_collector(endpoint, resource()), log_transport.to_collector(
        endpoint, resource())
    service = OpenAIv2Service(logs.logger(INSTRUMENTATION_SCOPE))
    traffic = service.emit_traffic(spans.tracer, REQUESTS, plain_every=2)
    spans.flush()  # raises unless every span and log record reached the collector
    logs.flush()
    return traffic


@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_openai_v2_log_records_through_the_collectors_logs_pipeline_are_judged(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], collector_build: None,
    tmp_path: Path, encoding: SpanEncoding,
) -> None:
    """Its spans carry no content: the answers reach the worker only through the collector's
    logs pipeline, on the logs topic's partition of their spans' number
    (``partition_logs_by_trace_id``), read with ``OTLP_LOGS_TOPIC``."""
    _, server = fake_judge
    topics = Topics.fresh(f"collector-logs-{encoding}")
    logs_topic = f"logs-{topics.traces}"
    await create_topics(kafka, topics, partitions=PARTITIONS)
    await broker.create_topics(kafka, {logs_topic: PARTITIONS})
    env = worker_env(topics.env(kafka), server.url, TRACES_FORMAT=encoding,
                     OTLP_LOGS_TOPIC=logs_topic, TRACE_QUIET_SECONDS=QUIET_S,
                     TRACE_MAX_WAIT_SECONDS="30")

    with local_collector.running(kafka, topics.traces, encoding, logs_topic) as running:
        async with WorkerPool(tmp_path) as pool:
            worker = await pool.start(env)  # up first: the telemetry arrives while it runs
            traffic = await asyncio.to_thread(send_openai_v2_through, running.endpoint)
            ids = {t.request.request_id: t for t in traffic.answered}
            records = await read_all(kafka, topics.verdicts, at_least=len(EXPECTED),
                                     timeout_s=60)
            spans_done = await wait_committed(kafka, topics.group, topics.traces, 30)
            logs_done = await wait_committed(kafka, topics.group, logs_topic, 30)
            assert await worker.terminate() == 0

    verdicts = verdicts_by_trace(records)
    assert set(verdicts) == {ids[name].trace_id for name in EXPECTED}, worker.log()
    for name, outcome in EXPECTED.items():
        [verdict] = verdicts[ids[name].trace_id]
        assert verdict["verdict"] == outcome, name
        assert verdict["span_id"] == ids[name].answer_span_id, "the chat span answers"
        assert verdict["context_source"] == "llm_input", "the documents are in the prompt"
    assert spans_done[0] == spans_done[1]
    assert logs_done[0] == logs_done[1]
    # Each trace's log records sit on the logs topic's partition of its spans' number.
    spans_at = {r.key: r.partition for r in await read_all(kafka, topics.traces, timeout_s=2)}
    logs_at = {r.key: r.partition for r in await read_all(kafka, logs_topic, timeout_s=2)}
    assert set(logs_at) == {t.trace_id.encode() for t in traffic.answered}
    assert {key: spans_at[key] for key in logs_at} == logs_at
    assert await read_all(kafka, topics.dlq, timeout_s=1) == []
    assert tracebacks(worker.log()) == []
