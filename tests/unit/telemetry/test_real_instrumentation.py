"""Convention mapping on what real instrumentations emit: OpenInference's LlamaIndex and openai
instrumentors, spans encoded by the SDK's OTLP encoder, decoded, assembled per trace, mapped."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.sdk.trace import ReadableSpan

from consumer.inputs import OtlpEncoding
from consumer.inputs.otlp.decode import decode_otlp
from consumer.telemetry.conventions import map_trace
from consumer.telemetry.mapped_trace import MappedTrace
from tests.support import instrumented_app as app
from tests.support.otel_spans import otlp_json

# openinference-instrumentation-llama-index 4.6 records LLM metadata with pydantic v1's
# ``.json()`` (its _handler.py), which pydantic 2 flags: their deprecation, not ours.
pytestmark = pytest.mark.filterwarnings(
    "ignore:The `json` method is deprecated:pydantic.warnings.PydanticDeprecatedSince20")

ENCODINGS: tuple[OtlpEncoding, ...] = ("otlp_proto", "otlp_json")
NO_MATCH = "Light speed?"
CONTEXT = "Context: Dune is a science fiction novel by Frank Herbert."


@dataclass(frozen=True)
class Run:
    """One instrumented interaction: what the app saw, and the spans it emitted."""

    reply: str
    nodes: list[tuple[str, str]]  # (node id, text) the answer was given
    spans: list[ReadableSpan]


@dataclass(frozen=True)
class Runs:
    """Everything the instrumented apps did, run once for the module (each run costs ~0.2 s)."""

    indexing: list[ReadableSpan]
    query: Run
    streamed: Run
    reranked: Run
    unanswered: Run
    openai_call: Run


@pytest.fixture(scope="module")
def runs() -> Iterator[Runs]:
    """The RAG app indexed and queried, and a plain openai call, each under OpenInference."""
    tracer_provider, exporter = app.provider()
    fake = app.FakeModel()

    def taken() -> list[ReadableSpan]:
        spans = list(exporter.get_finished_spans())
        exporter.clear()
        return spans

    def run(reply: str, nodes: list[tuple[str, str]]) -> Run:
        return Run(reply, nodes, taken())

    with fake.server:
        with app.instrumented(LlamaIndexInstrumentor(), tracer_provider):
            index = app.build_index()
            indexing = taken()
            query = run(*app.ask(index, fake.server.url))
            streamed = run(*app.ask(index, fake.server.url, streaming=True))
            reranked = run(*app.ask(index, fake.server.url, rerank=True))
            # No node shares a word with this question: the reranker keeps none.
            unanswered = run(*app.ask(index, fake.server.url, NO_MATCH, rerank=True))
        with app.instrumented(OpenAIInstrumentor(), tracer_provider):
            openai_call = run(app.chat_with_context(fake.server.url, CONTEXT), [])
    yield Runs(indexing, query, streamed, reranked, unanswered, openai_call)
    tracer_provider.shutdown()


def mapped(spans: list[ReadableSpan], encoding: OtlpEncoding) -> dict[str, MappedTrace | None]:
    """Each trace's record, as the collector's exporter writes it, decoded and mapped."""
    found = {}
    for trace_id, record in app.records(spans).items():
        value = record if encoding == "otlp_proto" else otlp_json(record)
        decoded = decode_otlp(value, encoding)
        assert {span.trace_id for span in decoded.kept} == {trace_id}
        found[trace_id] = map_trace(decoded.kept)
    return found


def only_candidate(spans: list[ReadableSpan], encoding: OtlpEncoding) -> MappedTrace:
    """The one trace of an interaction that maps to a candidate."""
    candidates = [trace for trace in mapped(spans, encoding).values() if trace is not None]
    assert len(candidates) == 1
    return candidates[0]


def root_span_id(spans: list[ReadableSpan], name: str) -> str:
    """The hex span id of the span called ``name`` (there must be one)."""
    [span] = [span for span in spans if span.name == name]
    assert span.context is not None
    return format(span.context.span_id, "016x")


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_llamaindex_query_maps_to_its_answer_question_and_retrieved_nodes(
    runs: Runs, encoding: OtlpEncoding
) -> None:
    query = runs.query
    trace = only_candidate(query.spans, encoding)
    assert query.reply == app.REPLY
    assert trace.answer == app.REPLY
    # The root CHAIN speaks for the trace: RetrieverQueryEngine.query's output.value.
    assert trace.answer_span_id == root_span_id(query.spans, "RetrieverQueryEngine.query")
    assert trace.input == app.QUESTION
    assert trace.context_source == "retrieval"
    # LlamaIndex retrieves nodes (ids of its own), not the Documents: their ids and texts.
    assert [(doc.id, doc.content) for doc in trace.documents] == query.nodes
    assert len(query.nodes) == app.TOP_K
    sources = {meta["source"] for _, _, meta in app.DOCUMENTS}
    assert all(doc.metadata and doc.metadata["source"] in sources for doc in trace.documents)
    assert (trace.project_id, trace.session_id) == (app.PROJECT, app.SESSION)
    assert not trace.tool_calls
    assert not trace.agent


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_indexing_traces_splitters_and_embeddings_map_to_nothing(
    runs: Runs, encoding: OtlpEncoding
) -> None:
    traces = mapped(runs.indexing, encoding)
    names = {span.name for span in runs.indexing}
    # Building the index emits its own traces (a splitter root, an embedding root): GenAI
    # spans, kept at decode, but no answer to a user.
    assert len(traces) >= 2
    assert any("Splitter" in name for name in names)
    assert any("Embedding" in name for name in names)
    assert traces == dict.fromkeys(traces)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_streamed_query_takes_its_answer_from_the_llm_span(
    runs: Runs, encoding: OtlpEncoding
) -> None:
    streamed = runs.streamed
    trace = only_candidate(streamed.spans, encoding)
    # The root's output.value is {"response_gen": "<generator object>", ...}: no answer there.
    assert streamed.reply == app.REPLY
    assert trace.answer == app.REPLY
    assert trace.answer_span_id == root_span_id(streamed.spans, "OpenAI.stream_chat")
    assert trace.input == app.QUESTION
    assert [(doc.id, doc.content) for doc in trace.documents] == streamed.nodes


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_reranked_query_reads_the_rerankers_output_documents(
    runs: Runs, encoding: OtlpEncoding
) -> None:
    reranked = runs.reranked
    trace = only_candidate(reranked.spans, encoding)
    assert len(reranked.nodes) == 1
    assert "Dune" in reranked.nodes[0][1]
    assert [(doc.id, doc.content) for doc in trace.documents] == reranked.nodes
    assert trace.answer == app.REPLY


def test_a_reranker_that_keeps_nothing_leaves_llamaindex_answering_alone(runs: Runs) -> None:
    unanswered = runs.unanswered
    kinds = [span.attributes.get("openinference.span.kind") if span.attributes else None
             for span in unanswered.spans]
    # LlamaIndex never calls the model: the query engine answers its canned "Empty Response",
    # and the reranker span carries input documents but no output documents at all.
    assert unanswered.reply == "Empty Response"
    assert not unanswered.nodes
    assert "RERANKER" in kinds
    assert "LLM" not in kinds


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_reranker_that_keeps_nothing_leaves_no_candidate(
    runs: Runs, encoding: OtlpEncoding
) -> None:
    assert list(mapped(runs.unanswered.spans, encoding).values()) == [None]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_an_openai_call_without_retrieval_falls_back_to_its_input_as_context(
    runs: Runs, encoding: OtlpEncoding
) -> None:
    call = runs.openai_call
    trace = only_candidate(call.spans, encoding)
    # output.value is the raw API response (JSON): the answer is the output message's text.
    assert call.reply == app.REPLY
    assert trace.answer == app.REPLY
    assert trace.input == app.QUESTION
    assert trace.context_source == "llm_input"
    assert [(doc.content, doc.metadata) for doc in trace.documents] == [
        (CONTEXT, {"role": "system"}), (app.QUESTION, {"role": "user"})]
    assert trace.project_id == app.PROJECT


def test_the_instrumentors_are_removed_after_the_runs(runs: Runs) -> None:
    # Other tests use the openai client (the judge): they must see it uninstrumented.
    assert runs.openai_call.spans
    assert not LlamaIndexInstrumentor().is_instrumented_by_opentelemetry
    assert not OpenAIInstrumentor().is_instrumented_by_opentelemetry
