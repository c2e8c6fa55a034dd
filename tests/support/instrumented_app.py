"""Real instrumentation output: a tiny LlamaIndex RAG app, a LlamaIndex ``FunctionAgent`` with
tools and a plain openai client call, traced by OpenInference's own instrumentors, with a fake
chat server standing in for the model.

Nothing here writes an attribute by hand: the spans are what ``openinference-instrumentation-
llama-index`` and ``openinference-instrumentation-openai`` emit, so the mapping is checked
against what users send. Everything runs offline: ``MockEmbedding`` embeds, and the LLM is
``llama_index.llms.openai.OpenAI`` (or ``openai.OpenAI``) pointed at ``JudgeServer`` on loopback.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import openai
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.response.schema import StreamingResponse
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai import OpenAI as LlamaIndexOpenAI
from llama_index_instrumentation import get_dispatcher  # llama_index.core's own, re-exported
from openinference.instrumentation import using_session
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import PydanticDeprecationWarning

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
AGENT_PROMPT = "You are the shop's support agent."
ORDER_QUESTION = "Where is order 88123?"
ORDER_RESULT = "Order 88123: left the warehouse on 3 May, with the courier."
ORDER_REPLY = "Order 88123 left the warehouse on 3 May."
WEATHER_QUESTION = "What's the weather in Oslo?"
WEATHER_FAILURE = "weather service timed out"
WEATHER_REPLY = "I could not reach the weather service just now."
_dispatcher = get_dispatcher(__name__)
Tool = Callable[..., str]  # a plain function the agent may call (FunctionTool.from_defaults)


def lookup_order(order_id: str) -> str:
    """Look an order up by its id."""
    return ORDER_RESULT


def search_kb(query: str) -> str:
    """Search the help centre."""
    return "Refunds: within 30 days of delivery."


def get_weather(city: str) -> str:
    """The weather in a city now."""
    raise TimeoutError(WEATHER_FAILURE)


class Instrumentor(Protocol):
    """What OpenInference's instrumentors share (``BaseInstrumentor``, untyped upstream)."""

    def instrument(self, **kwargs: Any) -> None: ...

    def uninstrument(self, **kwargs: Any) -> None: ...


@dataclass(frozen=True)
class ToolPlan:
    """How the model meets a question holding ``keyword`` when it is offered ``tool``: it asks
    for the tool with ``arguments``, then, once the tool's result (or its error) is back in the
    conversation, answers ``reply``."""

    keyword: str
    tool: str
    arguments: dict[str, Any]
    reply: str


class FakeModel:
    """A chat server on loopback that keeps every request and answers ``REPLY``, or, offered the
    tool a ``ToolPlan`` names for the question, calls it first (streamed or not, as asked)."""

    def __init__(self, plans: Sequence[ToolPlan] = ()) -> None:
        self.requests: list[dict[str, Any]] = []
        self.plans = tuple(plans)
        self.server = JudgeServer(self._respond, models=(MODEL,))

    def _respond(self, request: dict[str, Any]) -> Reply:
        self.requests.append(request)
        plan, tool_result_back = self._plan(request)
        if plan is not None and not tool_result_back:
            body = _tool_call_completion(plan)
            stream = _tool_call_stream(body, plan)
        else:
            reply = plan.reply if plan is not None else REPLY
            body = completion(reply, MODEL, prompt_tokens=40, completion_tokens=6)
            stream = _event_stream(body, reply)
        if not request.get("stream"):
            return Reply(body=body)
        return Reply(body=stream, headers={"Content-Type": "text/event-stream"})

    def _plan(self, request: dict[str, Any]) -> tuple[ToolPlan | None, bool]:
        """The plan for the request's last user message among the offered tools, and whether a
        tool result came back after that message."""
        messages = request.get("messages", [])
        offered = {(tool.get("function") or {}).get("name") for tool in request.get("tools") or []}
        users = [n for n, message in enumerate(messages) if message.get("role") == "user"]
        if not users:
            return None, False
        question = str(messages[users[-1]].get("content", "")).lower()
        plan = next((plan for plan in self.plans
                     if plan.keyword in question and plan.tool in offered), None)
        return plan, any(m.get("role") == "tool" for m in messages[users[-1] + 1:])


def _tool_call_completion(plan: ToolPlan) -> dict[str, Any]:
    """A completion whose one choice asks for ``plan.tool`` (``finish_reason`` tool_calls)."""
    body = completion(None, MODEL, prompt_tokens=40, completion_tokens=6)
    [choice] = body["choices"]
    choice["finish_reason"] = "tool_calls"
    choice["message"]["tool_calls"] = [{
        "id": f"call_{plan.tool}", "type": "function",
        "function": {"name": plan.tool, "arguments": json.dumps(plan.arguments)}}]
    return body


def _tool_call_stream(body: dict[str, Any], plan: ToolPlan) -> str:
    """A tool call as OpenAI streams it: the call's id and name, its arguments in two pieces."""
    arguments = json.dumps(plan.arguments)
    half = len(arguments) // 2
    deltas: list[dict[str, Any]] = [
        {"role": "assistant", "content": None, "tool_calls": [{
            "index": 0, "id": f"call_{plan.tool}", "type": "function",
            "function": {"name": plan.tool, "arguments": ""}}]},
        *({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
          for piece in (arguments[:half], arguments[half:])),
    ]
    chunks = [_chunk(body, delta, None) for delta in deltas] + [_chunk(body, {}, "tool_calls")]
    return _sse(chunks)


def _event_stream(body: dict[str, Any], reply: str) -> str:
    """A completion as OpenAI streams it: one chunk per word, then the finish, then [DONE]."""
    words = reply.split(" ")
    deltas = [{"role": "assistant", "content": ""}] + [
        {"content": word if n == 0 else " " + word} for n, word in enumerate(words)]
    return _sse([_chunk(body, delta, None) for delta in deltas] + [_chunk(body, {}, "stop")])


def _sse(chunks: list[dict[str, Any]]) -> str:
    return "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"


def _chunk(body: dict[str, Any], delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"],
            "model": MODEL, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


AGENT_PLANS = (
    ToolPlan("order", "lookup_order", {"order_id": "88123"}, ORDER_REPLY),
    ToolPlan("weather", "get_weather", {"city": "Oslo"}, WEATHER_REPLY),
)


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


def run_agent(base_url: str, question: str, tools: Sequence[Tool], *,
              streaming: bool = True) -> str:
    """One question to a LlamaIndex ``FunctionAgent`` offered ``tools``: its final reply.

    The agent is a workflow: made and run inside an event loop of its own (``asyncio.run``
    closes it after). ``streaming`` is the agent's own default.
    """

    async def run() -> str:
        # The agent calls the model through an async client: one of ours, closed on this
        # loop, not one LlamaIndex would leave open for the loop's garbage.
        client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-fake", max_retries=0)
        try:
            llm = LlamaIndexOpenAI(model=MODEL, api_base=base_url, api_key="sk-fake",
                                   max_retries=0, async_openai_client=client)
            agent = FunctionAgent(tools=[FunctionTool.from_defaults(fn=tool) for tool in tools],
                                  llm=llm, system_prompt=AGENT_PROMPT, streaming=streaming)
            return str(await agent.run(question))
        finally:
            await client.close()

    with warnings.catch_warnings():
        # llama-index-workflows finds the agent's steps with ``inspect.getmembers`` (when the
        # agent is made, and again when it runs), which reads every attribute of the pydantic
        # agent, the deprecated ones too: pydantic's warnings of them are theirs, not ours.
        warnings.simplefilter("ignore", PydanticDeprecationWarning)
        return asyncio.run(run())


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
