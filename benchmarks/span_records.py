"""Raw telemetry for the span benchmarks, as the collector's Kafka exporter writes it (pure).

Records of 100 spans (about 34 kB) in ``otlp_proto``, one trace per record keyed by its hex
trace id (``partition_traces_by_id: true``), in a repeating cycle of ``CYCLE`` records where
95% of the spans carry no GenAI content (HTTP server and client, database, cache):

- a RAG request (an HTTP root, an OpenInference chain, embedding, retriever and LLM spans
  among database calls) spread over two records, the second one ``RAG_TAIL_AFTER`` records
  later on its partition, holding the chain and the root (spans are exported as they end);
- an agent run in one record (OTel GenAI: ``invoke_agent``, ``chat``, ``execute_tool``);
- traces of services with no GenAI at all, which the worker must read past.

So every cycle brings two traces to judge and 50 GenAI spans out of 1,000. ``dense_records``
is the other extreme, a service where every request is a RAG request: one whole trace of 100
spans per record, 5 of them GenAI (chain, embedding, retriever, two LLM calls). The spans are
made once by the real OTel SDK and encoded by its own OTLP encoder (what the OTLP exporters
send and the collector forwards); each cycle then gets fresh trace ids, written into a copy
of those bytes (an id is a fixed-length field: nothing else in the encoding moves).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import NamedTuple

from openinference.semconv.trace import (
    DocumentAttributes,
    MessageAttributes,
    OpenInferenceSpanKindValues,
    SpanAttributes,
)
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Tracer

from consumer.telemetry import genai

SPANS_PER_RECORD = 100
CYCLE = 10  # records: rag head, plain x3, rag tail, plain x2, agent, plain x2
RAG_GENAI_SPANS = 20  # over the RAG trace's two records (200 spans)
AGENT_GENAI_SPANS = 30  # of the agent trace's 100
JUDGED_PER_CYCLE = 2  # the RAG trace and the agent run
GENAI_PER_CYCLE = RAG_GENAI_SPANS + AGENT_GENAI_SPANS
RAG_TAIL_AFTER = 4  # the RAG trace's second record comes this many records after its first

KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
_DOC = f"{SpanAttributes.RETRIEVAL_DOCUMENTS}."
_OUT = f"{SpanAttributes.LLM_OUTPUT_MESSAGES}.0."
_IN = f"{SpanAttributes.LLM_INPUT_MESSAGES}."
_SQL = ("SELECT o.id, o.status, o.total FROM orders o JOIN customers c ON c.id = o.customer_id "
        "WHERE o.updated_at > $1 LIMIT 50")
_RESOURCE = {
    "service.name": "support-assistant", "service.version": "2.14.3",
    "deployment.environment.name": "production", "host.name": "ip-10-2-14-37",
    "k8s.namespace.name": "assistant", "k8s.pod.name": "support-assistant-7d9f8b6c4-x2kqp",
    "k8s.deployment.name": "support-assistant", "cloud.provider": "aws",
    "cloud.region": "eu-west-1", "process.runtime.name": "cpython",
    "process.runtime.version": "3.11.9",
}


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One record as the exporter writes it: key (hex trace id), value, and what it holds."""

    key: bytes
    value: bytes
    kind: str  # rag_head | rag_tail | agent | plain
    genai_spans: int


DENSE_GENAI_SPANS = 5  # per record of ``dense_records``, each one trace to judge


@dataclass(frozen=True, slots=True)
class _Template:
    kind: str
    value: bytes
    trace_id: bytes  # the SDK's id in ``value``, replaced per copy
    genai_spans: int


def records(count: int, seed: int = 7) -> Iterator[SpanRecord]:
    """``count`` records in production order: whole cycles, then a partial one.

    Trace ids are random (from ``seed``) and new in every cycle; a partial last cycle may
    hold a RAG head without its tail (a trace that then closes by its max wait).
    """
    rng = random.Random(seed)
    templates = _templates()
    for start in range(0, count, CYCLE):
        ids = {kind: rng.randbytes(16) for kind in ("rag", "agent", *_PLAIN_SLOTS)}
        for slot in range(min(CYCLE, count - start)):
            template = templates[_ORDER[slot]]
            trace_id = ids[_trace_of(slot)]
            yield SpanRecord(trace_id.hex().encode(), _stamped(template, trace_id),
                             template.kind, template.genai_spans)


def dense_records(count: int, seed: int = 7) -> Iterator[SpanRecord]:
    """``count`` records, each a whole RAG request (root included) with a new trace id."""
    rng = random.Random(seed)
    template = _templates()["rag_small"]
    for _ in range(count):
        trace_id = rng.randbytes(16)
        yield SpanRecord(trace_id.hex().encode(), _stamped(template, trace_id), template.kind,
                         template.genai_spans)


_ORDER = ("rag_head", "plain", "plain", "plain", "rag_tail", "plain", "plain", "agent", "plain",
          "plain")
_PLAIN_SLOTS = tuple(f"plain{slot}" for slot, kind in enumerate(_ORDER) if kind == "plain")


def _trace_of(slot: int) -> str:
    kind = _ORDER[slot]
    if kind.startswith("rag"):
        return "rag"
    return "agent" if kind == "agent" else f"plain{slot}"


def _stamped(template: _Template, trace_id: bytes) -> bytes:
    return template.value.replace(template.trace_id, trace_id)


@cache
def _templates() -> dict[str, _Template]:
    """The four record shapes, each made once by the SDK and encoded by its OTLP encoder."""
    provider = TracerProvider(resource=Resource.create(_RESOURCE))
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = Tracers(*(provider.get_tracer(name, "0.52b0") for name in SCOPES))

    def finished() -> list[ReadableSpan]:
        spans = list(exporter.get_finished_spans())  # in end order, as a batch exports them
        exporter.clear()
        return spans

    _rag_request(tracer)
    rag = finished()
    _agent_run(tracer)
    agent = finished()
    _plain_request(tracer)
    plain = finished()
    _small_rag_request(tracer)
    small = finished()
    provider.shutdown()
    return {
        "rag_head": _template("rag_head", rag[:SPANS_PER_RECORD]),
        "rag_tail": _template("rag_tail", rag[SPANS_PER_RECORD:]),
        "agent": _template("agent", agent),
        "plain": _template("plain", plain),
        "rag_small": _template("rag_small", small),
    }


def _template(kind: str, spans: Sequence[ReadableSpan]) -> _Template:
    assert len(spans) == SPANS_PER_RECORD, (kind, len(spans))
    value = bytes(encode_spans(spans).SerializeToString())
    context = spans[0].context
    assert context is not None
    trace_id = context.trace_id.to_bytes(16, "big")
    # Every span carries the id once; anywhere else, replacing it would corrupt the record.
    assert value.count(trace_id) == len(spans), kind
    genai_spans = sum(1 for span in spans if _is_genai(span))
    return _Template(kind, value, trace_id, genai_spans)


def _is_genai(span: ReadableSpan) -> bool:
    return any(key.startswith(("openinference.", "gen_ai.")) for key in span.attributes or {})


# -- the traces --------------------------------------------------------------------------------

# One tracer per instrumentation, as in a real service: the encoder groups each record's spans
# into one ``ScopeSpans`` per instrumentation scope.
SCOPES = (
    "opentelemetry.instrumentation.fastapi", "opentelemetry.instrumentation.asyncpg",
    "opentelemetry.instrumentation.httpx", "opentelemetry.instrumentation.redis",
    "openinference.instrumentation.llama_index", "opentelemetry.instrumentation.openai_v2",
)


class Tracers(NamedTuple):
    """A tracer per instrumentation scope, in the order of ``SCOPES``."""

    server: Tracer
    database: Tracer
    http: Tracer
    cache: Tracer
    openinference: Tracer
    genai: Tracer


def _http_root_attributes(route: str) -> dict[str, str | int]:
    return {
        "http.request.method": "POST", "url.path": route, "url.scheme": "https",
        "http.route": route, "http.response.status_code": 200, "server.address":
        "assistant.internal.example.com", "server.port": 443, "client.address": "10.2.7.19",
        "user_agent.original": "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15",
        "network.protocol.version": "1.1",
    }


def _database(tracers: Tracers, n: int) -> None:
    with tracers.database.start_as_current_span(f"SELECT orders {n}",
                                                kind=SpanKind.CLIENT) as span:
        span.set_attributes({
            "db.system.name": "postgresql", "db.namespace": "orders",
            "db.operation.name": "SELECT", "db.query.text": _SQL,
            "server.address": "orders-db.internal", "server.port": 5432,
            "db.response.returned_rows": 50,
        })


def _http_client(tracers: Tracers, n: int) -> None:
    with tracers.http.start_as_current_span("GET", kind=SpanKind.CLIENT) as span:
        span.set_attributes({
            "http.request.method": "GET",
            "url.full": f"https://inventory.internal.example.com/v2/items/{n:06d}?fields=stock,price",
            "server.address": "inventory.internal.example.com", "server.port": 443,
            "http.response.status_code": 200, "network.protocol.version": "2",
        })


def _cache(tracers: Tracers, n: int) -> None:
    with tracers.cache.start_as_current_span("GET session", kind=SpanKind.CLIENT) as span:
        span.set_attributes({
            "db.system.name": "redis", "db.operation.name": "GET",
            "db.query.text": f"GET session:7f3e9c2a-{n:04d}-4b1d-9a55-2c81d0e4f6b7",
            "server.address": "cache.internal", "server.port": 6379,
        })


_PLAIN_CALLS = (_database, _http_client, _cache)


def _plain_calls(tracers: Tracers, count: int, offset: int = 0) -> None:
    for n in range(count):
        _PLAIN_CALLS[(n + offset) % len(_PLAIN_CALLS)](tracers, n + offset)


def _plain_request(tracers: Tracers) -> None:
    """A service with no GenAI: an HTTP root and 99 calls under it."""
    with tracers.server.start_as_current_span("POST /orders/sync", kind=SpanKind.SERVER) as root:
        root.set_attributes(_http_root_attributes("/orders/sync"))
        _plain_calls(tracers, SPANS_PER_RECORD - 1)


def _rag_request(tracers: Tracers) -> None:
    """A RAG request of 200 spans: HTTP root, chain, 6 x (embedding, retriever, LLM) among
    database calls, and one more LLM call; 20 GenAI spans, the chain and the root ending last."""
    question = "Which warehouse ships order 18342, and when will it arrive?"
    answer = ("Order 18342 ships from the Rotterdam warehouse [1] and is due on 14 March "
              "[2].")
    tracer = tracers.openinference
    with tracers.server.start_as_current_span("POST /ask", kind=SpanKind.SERVER) as root:
        root.set_attributes(_http_root_attributes("/ask"))
        with tracer.start_as_current_span("query") as chain:
            chain.set_attributes({KIND: OpenInferenceSpanKindValues.CHAIN.value,
                                  SpanAttributes.INPUT_VALUE: question})
            for step in range(6):
                _plain_calls(tracers, 29, offset=step * 29)
                with tracer.start_as_current_span("embed") as embed:
                    embed.set_attributes({KIND: OpenInferenceSpanKindValues.EMBEDDING.value,
                                          "embedding.model_name": "text-embedding-3-small"})
                with tracer.start_as_current_span("retrieve") as retriever:
                    retriever.set_attributes({
                        KIND: OpenInferenceSpanKindValues.RETRIEVER.value,
                        SpanAttributes.INPUT_VALUE: question,
                        f"{_DOC}0.{DocumentAttributes.DOCUMENT_ID}": f"shipping-{step}",
                        f"{_DOC}0.{DocumentAttributes.DOCUMENT_CONTENT}":
                            "Order 18342 is packed at the Rotterdam warehouse.",
                        f"{_DOC}0.{DocumentAttributes.DOCUMENT_SCORE}": 0.82,
                        f"{_DOC}1.{DocumentAttributes.DOCUMENT_ID}": f"eta-{step}",
                        f"{_DOC}1.{DocumentAttributes.DOCUMENT_CONTENT}":
                            "Orders from Rotterdam arrive within 3 days; 18342 is due 14 March.",
                    })
                _llm(tracer, question, answer)
            _plain_calls(tracers, 5, offset=200)
            _llm(tracer, question, answer)
            chain.set_attribute(SpanAttributes.OUTPUT_VALUE, answer)


def _small_rag_request(tracers: Tracers) -> None:
    """A RAG request of 100 spans: HTTP root, chain, embedding, retriever and two LLM calls
    among 94 database, HTTP and cache calls."""
    question = "Which warehouse ships order 18342, and when will it arrive?"
    answer = "Order 18342 ships from the Rotterdam warehouse [1] on 14 March [2]."
    tracer = tracers.openinference
    with tracers.server.start_as_current_span("POST /ask", kind=SpanKind.SERVER) as root:
        root.set_attributes(_http_root_attributes("/ask"))
        with tracer.start_as_current_span("query") as chain:
            chain.set_attributes({KIND: OpenInferenceSpanKindValues.CHAIN.value,
                                  SpanAttributes.INPUT_VALUE: question})
            _plain_calls(tracers, 60)
            with tracer.start_as_current_span("embed") as embed:
                embed.set_attributes({KIND: OpenInferenceSpanKindValues.EMBEDDING.value,
                                      "embedding.model_name": "text-embedding-3-small"})
            with tracer.start_as_current_span("retrieve") as retriever:
                retriever.set_attributes({
                    KIND: OpenInferenceSpanKindValues.RETRIEVER.value,
                    SpanAttributes.INPUT_VALUE: question,
                    f"{_DOC}0.{DocumentAttributes.DOCUMENT_ID}": "shipping",
                    f"{_DOC}0.{DocumentAttributes.DOCUMENT_CONTENT}":
                        "Order 18342 is packed at the Rotterdam warehouse.",
                    f"{_DOC}1.{DocumentAttributes.DOCUMENT_ID}": "eta",
                    f"{_DOC}1.{DocumentAttributes.DOCUMENT_CONTENT}":
                        "Orders from Rotterdam arrive within 3 days; 18342 is due 14 March.",
                })
            _llm(tracer, question, "Looking up the order.")
            _plain_calls(tracers, 34, offset=60)
            _llm(tracer, question, answer)
            chain.set_attribute(SpanAttributes.OUTPUT_VALUE, answer)


def _llm(tracer: Tracer, question: str, answer: str) -> None:
    with tracer.start_as_current_span("chat gpt-4o-mini") as llm:
        llm.set_attributes({
            KIND: OpenInferenceSpanKindValues.LLM.value,
            SpanAttributes.LLM_MODEL_NAME: "gpt-4o-mini",
            f"{_IN}0.{MessageAttributes.MESSAGE_ROLE}": "system",
            f"{_IN}0.{MessageAttributes.MESSAGE_CONTENT}": "Answer from the documents only.",
            f"{_IN}1.{MessageAttributes.MESSAGE_ROLE}": "user",
            f"{_IN}1.{MessageAttributes.MESSAGE_CONTENT}": question,
            f"{_OUT}{MessageAttributes.MESSAGE_ROLE}": "assistant",
            f"{_OUT}{MessageAttributes.MESSAGE_CONTENT}": answer,
            SpanAttributes.LLM_TOKEN_COUNT_TOTAL: 412,
        })


def _agent_run(tracers: Tracers) -> None:
    """An agent run of 100 spans: HTTP root, ``invoke_agent``, 15 ``chat`` and 14
    ``execute_tool`` spans among database calls; 30 GenAI spans."""
    question = "Cancel my last order and tell me the refund amount."
    tracer = tracers.genai
    with tracers.server.start_as_current_span("POST /agent", kind=SpanKind.SERVER) as root:
        root.set_attributes(_http_root_attributes("/agent"))
        with tracer.start_as_current_span("invoke_agent support") as agent:
            agent.set_attributes({genai.GEN_AI_OPERATION_NAME: "invoke_agent",
                                  "gen_ai.agent.name": "support"})
            for step in range(15):
                _plain_calls(tracers, 5 if step < 9 else 4, offset=step * 5)
                reply = ("The order is cancelled; 42.50 EUR will be refunded." if step == 14
                         else f"Calling a tool, step {step}.")
                with tracer.start_as_current_span("chat gpt-4o") as chat:
                    chat.set_attributes({
                        genai.GEN_AI_OPERATION_NAME: genai.CHAT,
                        "gen_ai.request.model": "gpt-4o",
                        genai.GEN_AI_INPUT_MESSAGES: json.dumps([
                            {"role": "user", "parts": [{"type": "text", "content": question}]}]),
                        genai.GEN_AI_OUTPUT_MESSAGES: json.dumps([
                            {"role": "assistant", "parts": [{"type": "text", "content": reply}]}]),
                    })
                if step < 14:
                    with tracer.start_as_current_span("execute_tool orders") as tool:
                        tool.set_attributes({
                            genai.GEN_AI_OPERATION_NAME: "execute_tool",
                            genai.GEN_AI_TOOL_NAME: "orders",
                            genai.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"step": step}),
                            genai.GEN_AI_TOOL_CALL_RESULT: "ok",
                        })
