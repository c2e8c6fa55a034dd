"""The bundled labelled sample as the spans of an instrumented RAG service (real OTel SDK).

Each labelled row becomes one request to a RAG service, traced the way OpenInference's
LlamaIndex instrumentation traces a query (tests/support/instrumented_app.py records the real
thing; the names and attributes here follow it):

    POST /chat                       HTTP server root, no GenAI content
      RetrieverQueryEngine.query     CHAIN: input.value = question, output.value = answer
        SELECT chat_history          database
        VectorIndexRetriever.retrieve  RETRIEVER: retrieval.documents.N.document.*
          SELECT embeddings          database (the vector store)
        OpenAI.chat                  LLM: llm.input_messages (prompt with the context),
                                     llm.output_messages (the reply)
          POST                       HTTP client call to the model's API
      INSERT chat_log                database

Around the requests the service does what every service does: health checks and plain API
calls (HTTP and database spans only), and at start it builds its index (a splitter trace and
an embedding trace, as LlamaIndex emits them: GenAI spans, but no answer to judge). None of
those may get a verdict.

Every span is made by a real ``Tracer``; where the spans go (a collector over OTLP/HTTP, or
Kafka directly) is the provider's business: ``scripts/span_transport.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from openinference.semconv.resource import ResourceAttributes
from openinference.semconv.trace import (
    DocumentAttributes,
    EmbeddingAttributes,
    MessageAttributes,
    OpenInferenceMimeTypeValues,
    OpenInferenceSpanKindValues,
    SpanAttributes,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.semconv.attributes import (
    db_attributes,
    http_attributes,
    server_attributes,
    url_attributes,
)
from opentelemetry.trace import Span, SpanKind, Tracer

from consumer.jsonl import LabelledRow

SERVICE_NAME = "rag-api"
PROJECT_NAME = "factcheck-rag"
MODEL = "gpt-4o-mini"
KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
DOCS = SpanAttributes.RETRIEVAL_DOCUMENTS
# LlamaIndex's default question-answering prompt: the context rides in the user message.
SYSTEM_PROMPT = (
    "You are an expert Q&A system that is trusted around the world.\n"
    "Always answer the query using the provided context information, and not prior knowledge."
)
QA_TEMPLATE = (
    "Context information is below.\n---------------------\n{context}\n---------------------\n"
    "Given the context information and not prior knowledge, answer the query.\n"
    "Query: {question}\nAnswer: "
)
_CHAIN = OpenInferenceSpanKindValues.CHAIN.value
_RETRIEVER = OpenInferenceSpanKindValues.RETRIEVER.value
_LLM = OpenInferenceSpanKindValues.LLM.value
_EMBEDDING = OpenInferenceSpanKindValues.EMBEDDING.value
_JSON = OpenInferenceMimeTypeValues.JSON.value


@dataclass(frozen=True, slots=True)
class RetrievedDocument:
    """One document the retriever returned for a request."""

    id: str
    content: str


@dataclass(frozen=True, slots=True)
class RagRequest:
    """One question the service answered: what it retrieved and what the model replied."""

    request_id: str
    question: str
    documents: tuple[RetrievedDocument, ...]
    answer: str
    label: str | None = None  # the sample's label, for the demo's agreement


@dataclass(frozen=True, slots=True)
class AnsweredTrace:
    """The trace of one answered request, as a verdict will name it."""

    trace_id: str  # 32 hex: the verdict's trace_id
    answer_span_id: str  # the answering span (here CHAIN), 16 hex: the verdict's span_id
    request: RagRequest


@dataclass
class EmittedTraffic:
    """Every trace the service emitted: the answered requests and the rest."""

    answered: list[AnsweredTrace] = field(default_factory=list)
    other_trace_ids: list[str] = field(default_factory=list)  # indexing and plain traffic


def resource() -> Resource:
    """The service's resource, as ``phoenix.otel.register(project_name=...)`` sets it."""
    return Resource.create(
        {"service.name": SERVICE_NAME, ResourceAttributes.PROJECT_NAME: PROJECT_NAME}
    )


def from_labelled(row: LabelledRow) -> RagRequest:
    """A labelled sample row as the request it records (documents as strings or objects)."""
    documents = []
    for n, item in enumerate(row.documents or []):
        if isinstance(item, Mapping):
            doc_id, content = item.get("id"), item.get("content")
        else:
            doc_id, content = None, item
        documents.append(RetrievedDocument(str(doc_id or f"{row.id}-doc-{n}"), str(content or "")))
    return RagRequest(
        request_id=row.id,
        question=str(row.input or ""),
        documents=tuple(documents),
        answer=str(row.output or ""),
        label=row.label,
    )


class Answers(Protocol):
    """How an instrumentation traces one answered request (its trace, as a verdict names it)."""

    def __call__(self, tracer: Tracer, request: RagRequest) -> AnsweredTrace: ...


class BuildsIndex(Protocol):
    """How an instrumentation traces the index build at start (its trace ids)."""

    def __call__(self, tracer: Tracer, documents: Sequence[RetrievedDocument]) -> list[str]: ...


def emit_traffic(
    tracer: Tracer, requests: Sequence[RagRequest], *, plain_every: int = 5,
    answer: Answers | None = None, build: BuildsIndex | None = None,
) -> EmittedTraffic:
    """The service's life: build the index, then answer ``requests`` with a health check and
    a plain API call after every ``plain_every`` of them (0: none). ``answer`` and ``build``
    trace the GenAI work (default: as OpenInference's LlamaIndex instrumentation does; the
    OTel GenAI instrumentation's way: ``scripts/openai_v2_spans.py``)."""
    answer, build = answer or answer_request, build or build_index
    traffic = EmittedTraffic()
    corpus = [doc for request in requests[:3] for doc in request.documents]
    traffic.other_trace_ids += build(tracer, corpus)
    for n, request in enumerate(requests, start=1):
        traffic.answered.append(answer(tracer, request))
        if plain_every and n % plain_every == 0:
            traffic.other_trace_ids += [health_check(tracer), api_call(tracer, n)]
    return traffic


def answer_request(tracer: Tracer, request: RagRequest) -> AnsweredTrace:
    """One ``POST /chat`` of the service: retrieval, the model call, the database around."""
    session = {SpanAttributes.SESSION_ID: f"session-{request.request_id}"}
    with http_server(tracer, "POST", "/chat") as root, tracer.start_as_current_span(
        "RetrieverQueryEngine.query",
        attributes={KIND: _CHAIN, SpanAttributes.INPUT_VALUE: request.question, **session},
    ) as chain:
        database(tracer, "SELECT", "chat_history",
                  "SELECT role, content FROM chat_history WHERE session_id = $1")
        with tracer.start_as_current_span(
            "VectorIndexRetriever.retrieve", attributes={**_retrieved(request), **session}
        ):
            database(tracer, "SELECT", "embeddings",
                      "SELECT id, content FROM embeddings ORDER BY vector <=> $1 LIMIT 5")
        with tracer.start_as_current_span(
            "OpenAI.chat", attributes={**_llm_call(request), **session}
        ):
            http_client(tracer, "POST", "https://api.openai.com/v1/chat/completions")
        chain.set_attribute(SpanAttributes.OUTPUT_VALUE, request.answer)
        root.set_attribute(http_attributes.HTTP_RESPONSE_STATUS_CODE, 200)
        database(tracer, "INSERT", "chat_log",
                  "INSERT INTO chat_log (session_id, question, answer) VALUES ($1, $2, $3)")
    return AnsweredTrace(hex_trace_id(root), hex_span_id(chain), request)


def build_index(tracer: Tracer, documents: Sequence[RetrievedDocument]) -> list[str]:
    """The index built at start, as LlamaIndex traces it: a splitter trace and an embedding
    trace (GenAI spans, nothing answered); their trace ids."""
    texts = [doc.content for doc in documents]
    with tracer.start_as_current_span("SentenceSplitter.__call__", attributes={
        KIND: _CHAIN, **_json_value(SpanAttributes.INPUT_VALUE, {"nodes": len(texts)}),
    }) as splitter:
        for text in texts:
            with tracer.start_as_current_span(
                "SentenceSplitter.split_text_metadata_aware", attributes={
                    KIND: _CHAIN, **_json_value(SpanAttributes.INPUT_VALUE, {"text": text}),
                    **_json_value(SpanAttributes.OUTPUT_VALUE, [text]),
                }):
                pass
    embedded: dict[str, Any] = {KIND: _EMBEDDING, SpanAttributes.EMBEDDING_MODEL_NAME: MODEL}
    for n, text in enumerate(texts):
        embedded[f"{SpanAttributes.EMBEDDING_EMBEDDINGS}.{n}.{EmbeddingAttributes.EMBEDDING_TEXT}"
                 ] = text
    with tracer.start_as_current_span(
        "OpenAIEmbedding.get_text_embedding_batch", attributes=embedded
    ) as embedding:
        http_client(tracer, "POST", "https://api.openai.com/v1/embeddings")
    return [hex_trace_id(splitter), hex_trace_id(embedding)]


def health_check(tracer: Tracer) -> str:
    """A load balancer's ``GET /healthz``: one HTTP span; its trace id."""
    with http_server(tracer, "GET", "/healthz") as root:
        root.set_attribute(http_attributes.HTTP_RESPONSE_STATUS_CODE, 200)
    return hex_trace_id(root)


def api_call(tracer: Tracer, n: int) -> str:
    """A plain API call: HTTP and database spans, no GenAI content; its trace id."""
    with http_server(tracer, "GET", "/orders/{id}", f"/orders/{n}") as root:
        database(tracer, "SELECT", "orders", "SELECT * FROM orders WHERE id = $1")
        http_client(tracer, "GET", f"http://inventory:8080/items?order={n}")
        root.set_attribute(http_attributes.HTTP_RESPONSE_STATUS_CODE, 200)
    return hex_trace_id(root)


# ---------------------------------------------------------------------------- attributes


def _retrieved(request: RagRequest) -> dict[str, Any]:
    attributes: dict[str, Any] = {KIND: _RETRIEVER, SpanAttributes.INPUT_VALUE: request.question}
    for n, doc in enumerate(request.documents):
        prefix = f"{DOCS}.{n}."
        attributes[prefix + DocumentAttributes.DOCUMENT_ID] = doc.id
        attributes[prefix + DocumentAttributes.DOCUMENT_CONTENT] = doc.content
        attributes[prefix + DocumentAttributes.DOCUMENT_SCORE] = round(0.9 - 0.05 * n, 2)
        attributes[prefix + DocumentAttributes.DOCUMENT_METADATA] = json.dumps(
            {"source": "Factcheck-GPT"})
    return attributes


def _llm_call(request: RagRequest) -> dict[str, Any]:
    context = "\n\n".join(doc.content for doc in request.documents)
    prompt = QA_TEMPLATE.format(context=context, question=request.question)
    inputs, outputs = SpanAttributes.LLM_INPUT_MESSAGES, SpanAttributes.LLM_OUTPUT_MESSAGES
    role, content = MessageAttributes.MESSAGE_ROLE, MessageAttributes.MESSAGE_CONTENT
    prompt_tokens = (len(SYSTEM_PROMPT) + len(prompt)) // 4  # about four characters a token
    completion_tokens = len(request.answer) // 4
    return {
        KIND: _LLM,
        SpanAttributes.LLM_MODEL_NAME: MODEL,
        SpanAttributes.LLM_PROVIDER: "openai",
        SpanAttributes.LLM_SYSTEM: "openai",
        SpanAttributes.LLM_INVOCATION_PARAMETERS: json.dumps({"model": MODEL, "temperature": 0.1}),
        f"{inputs}.0.{role}": "system",
        f"{inputs}.0.{content}": SYSTEM_PROMPT,
        f"{inputs}.1.{role}": "user",
        f"{inputs}.1.{content}": prompt,
        f"{outputs}.0.{role}": "assistant",
        f"{outputs}.0.{content}": request.answer,
        SpanAttributes.OUTPUT_VALUE: request.answer,
        SpanAttributes.LLM_TOKEN_COUNT_PROMPT: prompt_tokens,
        SpanAttributes.LLM_TOKEN_COUNT_COMPLETION: completion_tokens,
        SpanAttributes.LLM_TOKEN_COUNT_TOTAL: prompt_tokens + completion_tokens,
    }


def _json_value(key: str, value: Any) -> dict[str, Any]:
    mime = SpanAttributes.INPUT_MIME_TYPE if key == SpanAttributes.INPUT_VALUE else (
        SpanAttributes.OUTPUT_MIME_TYPE)
    return {key: json.dumps(value), mime: _JSON}


# ---------------------------------------------------------------------------- plain spans
# (shared with scripts/openai_v2_spans.py: the service around its GenAI calls is the same)


@contextmanager
def http_server(tracer: Tracer, method: str, route: str, path: str | None = None
                ) -> Iterator[Span]:
    """An HTTP server span (a request's root), current while the block runs."""
    with tracer.start_as_current_span(f"{method} {route}", kind=SpanKind.SERVER, attributes={
        http_attributes.HTTP_REQUEST_METHOD: method,
        http_attributes.HTTP_ROUTE: route,
        url_attributes.URL_PATH: path or route,
        url_attributes.URL_SCHEME: "http",
        server_attributes.SERVER_ADDRESS: SERVICE_NAME,
    }) as span:
        yield span


def http_client(tracer: Tracer, method: str, url: str) -> None:
    """An HTTP client call, answered 200."""
    with tracer.start_as_current_span(method, kind=SpanKind.CLIENT, attributes={
        http_attributes.HTTP_REQUEST_METHOD: method,
        url_attributes.URL_FULL: url,
        http_attributes.HTTP_RESPONSE_STATUS_CODE: 200,
    }):
        pass


def database(tracer: Tracer, operation: str, table: str, query: str) -> None:
    """A PostgreSQL query."""
    with tracer.start_as_current_span(f"{operation} {table}", kind=SpanKind.CLIENT, attributes={
        db_attributes.DB_SYSTEM_NAME: "postgresql",
        db_attributes.DB_NAMESPACE: "rag",
        db_attributes.DB_OPERATION_NAME: operation,
        db_attributes.DB_COLLECTION_NAME: table,
        db_attributes.DB_QUERY_TEXT: query,
    }):
        pass


def hex_trace_id(span: Span) -> str:
    """The span's trace id, 32 hex digits."""
    return format(span.get_span_context().trace_id, "032x")


def hex_span_id(span: Span) -> str:
    """The span's id, 16 hex digits."""
    return format(span.get_span_context().span_id, "016x")
