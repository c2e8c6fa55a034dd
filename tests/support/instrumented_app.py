"""Real instrumentation output: a tiny LlamaIndex RAG app and a plain openai client call, traced
by OpenInference's own instrumentors, with a fake chat server standing in for the model.

Nothing here writes an attribute by hand: the spans are what ``openinference-instrumentation-
llama-index`` and ``openinference-instrumentation-openai`` emit, so the mapping is checked
against what users send. Everything runs offline: ``MockEmbedding`` embeds, and the LLM is
``llama_index.llms.openai.OpenAI`` (or ``openai.OpenAI``) pointed at ``JudgeServer`` on loopback.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import openai
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.response.schema import StreamingResponse
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.llms.openai import OpenAI as LlamaIndexOpenAI
from llama_index_instrumentation import get_dispatcher  # llama_index.core's own, re-exported
from openinference.instrumentation import using_session
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from consumer.localjudge.replies import Reply, completion
from consumer.localjudge.server import JudgeServer
from tests.support.otel_spans import otlp_proto

MODEL = "gpt-4o-mini"  # a name llama-index-llms-openai knows (it refuses unknown models)
REPLY = "Frank Herbert wrote Dune."
QUESTION = "Who wrote Dune?"
PROJECT = "dune-rag"
SERVICE = "rag-api"
SESSION = "session-42"
DOCUMENTS = (
    ("doc-dune", "Dune is a science fiction novel by Frank Herbert.", {"source": "books.txt"}),
    ("doc-paris", "Paris is the capital of France.", {"source": "geo.txt"}),
    ("doc-sky", "The sky looks blue because of Rayleigh scattering.", {"source": "sky.txt"}),
)
TOP_K = 2
_dispatcher = get_dispatcher(__name__)


class Instrumentor(Protocol):
    """What OpenInference's instrumentors share (``BaseInstrumentor``, untyped upstream)."""

    def instrument(self, **kwargs: Any) -> None: ...

    def uninstrument(self, **kwargs: Any) -> None: ...


class FakeModel:
    """A chat server on loopback that always answers ``REPLY`` and keeps every request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.server = JudgeServer(self._respond, models=(MODEL,))

    def _respond(self, request: dict[str, Any]) -> Reply:
        self.requests.append(request)
        body = completion(REPLY, MODEL, prompt_tokens=40, completion_tokens=6)
        if not request.get("stream"):
            return Reply(body=body)
        return Reply(body=_event_stream(body), headers={"Content-Type": "text/event-stream"})


def _event_stream(body: dict[str, Any]) -> str:
    """A completion as OpenAI streams it: one chunk per word, then the finish, then [DONE]."""
    words = REPLY.split(" ")
    deltas = [{"role": "assistant", "content": ""}] + [
        {"content": word if n == 0 else " " + word} for n, word in enumerate(words)]
    chunks = [_chunk(body, delta, None) for delta in deltas] + [_chunk(body, {}, "stop")]
    return "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"


def _chunk(body: dict[str, Any], delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"],
            "model": MODEL, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A real SDK provider for the app's resource, its finished spans kept in memory."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=Resource.create(
        {"service.name": SERVICE, "openinference.project.name": PROJECT}))
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return tracer_provider, exporter


@contextmanager
def instrumented(instrumentor: Instrumentor, tracer_provider: TracerProvider) -> Iterator[None]:
    """The instrumentor active on ``tracer_provider``, and removed after, whatever happens."""
    instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        yield
    finally:
        instrumentor.uninstrument()


@contextmanager
def event_loop() -> Iterator[None]:
    """A loop of the caller's thread for LlamaIndex's sync calls, closed and unset after.

    Its sync methods run coroutines through ``asyncio_run``, which takes the thread's current
    loop and, when there is none, makes one with ``asyncio.get_event_loop()`` and never closes
    it: garbage-collected in some later test, it fails that test with
    ``PytestUnraisableExceptionWarning`` (an unclosed loop and its self-pipe sockets).
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def build_index() -> VectorStoreIndex:
    """The RAG app's index over ``DOCUMENTS`` (splitting and embedding: the indexing traces)."""
    documents = [Document(text=body, id_=doc_id, metadata=meta) for doc_id, body, meta in DOCUMENTS]
    with event_loop():
        return VectorStoreIndex.from_documents(documents, embed_model=MockEmbedding(embed_dim=8))


def ask(index: VectorStoreIndex, base_url: str, question: str = QUESTION, *,
        streaming: bool = False, rerank: bool = False) -> tuple[str, list[tuple[str, str]]]:
    """One query through the app's query engine, in the user's session: the reply, and the
    (node id, text) of the nodes the answer was given (after the reranker, if any)."""
    llm = LlamaIndexOpenAI(model=MODEL, api_base=base_url, api_key="sk-fake", max_retries=0)
    # MockEmbedding gives every node the same vector: the top TOP_K are arbitrary, so a
    # reranked query retrieves them all and the reranker's choice is deterministic.
    top_k = len(DOCUMENTS) if rerank else TOP_K
    engine = index.as_query_engine(llm=llm, similarity_top_k=top_k, streaming=streaming,
                                   node_postprocessors=[KeywordRerank()] if rerank else [])
    with event_loop(), using_session(SESSION):
        response = engine.query(question)
        # A streamed answer is read to its end inside the session, as a web handler would.
        if isinstance(response, StreamingResponse):
            text = "".join(response.response_gen)
        else:
            text = str(response)
    nodes = [(found.node.node_id, found.node.get_content()) for found in response.source_nodes]
    return text, nodes


def chat_with_context(base_url: str, context: str, question: str = QUESTION) -> str:
    """A plain openai client call whose system message carries the context (no retriever)."""
    client = openai.OpenAI(base_url=base_url, api_key="sk-fake", max_retries=0)
    try:
        reply = client.chat.completions.create(model=MODEL, messages=[
            {"role": "system", "content": context},
            {"role": "user", "content": question},
        ])
    finally:
        client.close()
    return reply.choices[0].message.content or ""


def by_trace(spans: Sequence[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    """Finished spans grouped by hex trace id, in the order the traces first finished a span."""
    traces: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        assert span.context is not None
        traces.setdefault(format(span.context.trace_id, "032x"), []).append(span)
    return traces


def records(spans: Sequence[ReadableSpan]) -> dict[str, bytes]:
    """One ``otlp_proto`` record per trace, keyed by its trace id, as the collector's exporter
    writes them with ``partition_traces_by_id``."""
    return {trace_id: otlp_proto(group) for trace_id, group in by_trace(spans).items()}


class KeywordRerank(BaseNodePostprocessor):
    """A reranker as integration packages write them (Cohere's, Jina's): it reports its work
    with ``ReRankStartEvent`` / ``ReRankEndEvent`` inside a span of its own. It keeps the
    nodes sharing a word with the query, so the reranked set differs from the retrieved one."""

    top_n: int = 1

    @classmethod
    def class_name(cls) -> str:
        """LlamaIndex's name for the component."""
        return "KeywordRerank"

    @_dispatcher.span
    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        _dispatcher.event(ReRankStartEvent(query=query_bundle, nodes=nodes, top_n=self.top_n,
                                           model_name="keyword"))
        words = set((query_bundle.query_str if query_bundle else "").lower().strip("?").split())
        kept = [node for node in nodes
                if words & set(node.node.get_content().lower().strip(".").split())][:self.top_n]
        _dispatcher.event(ReRankEndEvent(nodes=kept))
        return kept
