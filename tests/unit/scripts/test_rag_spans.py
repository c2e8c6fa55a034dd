"""The demo's RAG service spans (scripts/rag_spans.py) read back by the worker's own decoding
and mapping: every bundled sample row maps to its question, answer and documents, so the
demo on spans judges what the demo on trace events judges; the index build, health checks
and API calls map to nothing; the HTTP and database spans are dropped at decode."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import pytest
from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from consumer.inputs.otlp.decode import decode_otlp
from consumer.jsonl import LabelledRow, read_labelled
from consumer.telemetry.conventions import map_trace
from consumer.telemetry.spans import Span
from scripts.rag_spans import (
    PROJECT_NAME,
    EmittedTraffic,
    RagRequest,
    RetrievedDocument,
    answer_request,
    emit_traffic,
    from_labelled,
    resource,
)
from scripts.span_transport import ENCODINGS, SpanEncoding, records_for

KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
QUESTION = RagRequest("r-1", "Who wrote Dune?",
                      (RetrievedDocument("d-1", "Dune is by Frank Herbert."),),
                      "Frank Herbert.", "grounded")


@pytest.fixture
def recorded() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=resource())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def kept_by_trace(spans: list[ReadableSpan], encoding: SpanEncoding) -> dict[str, list[Span]]:
    """The GenAI spans the worker keeps, by trace, from the exporter's records."""
    kept: dict[str, list[Span]] = defaultdict(list)
    for record in records_for(spans, encoding):
        for span in decode_otlp(record.value, encoding).kept:
            kept[span.trace_id].append(span)
    return kept


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_every_sample_row_maps_to_its_question_answer_and_documents(
    recorded: tuple[TracerProvider, InMemorySpanExporter], encoding: SpanEncoding
) -> None:
    provider, exporter = recorded
    requests = [from_labelled(row) for row in read_labelled()]
    traffic = emit_traffic(provider.get_tracer("test"), requests)
    kept = kept_by_trace(list(exporter.get_finished_spans()), encoding)

    assert len(traffic.answered) == len(requests) == 514
    mismatched = []
    for answered in traffic.answered:
        request = answered.request
        trace = map_trace(kept[answered.trace_id])
        assert trace is not None, request.request_id
        if (trace.answer, trace.input, [d.content for d in trace.documents],
                trace.answer_span_id, trace.context_source) != (
                request.answer, request.question, [d.content for d in request.documents],
                answered.answer_span_id, "retrieval"):
            mismatched.append(request.request_id)
        assert trace.project_id == PROJECT_NAME
        assert trace.session_id == f"session-{request.request_id}"
    assert mismatched == []


def test_the_index_build_and_plain_traffic_map_to_nothing(
    recorded: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = recorded
    traffic = emit_traffic(provider.get_tracer("test"), [QUESTION] * 4, plain_every=2)
    spans = list(exporter.get_finished_spans())
    kept = kept_by_trace(spans, "otlp_proto")

    # 2 index traces (splitter, embedding), then a health check and an API call per 2.
    assert len(traffic.other_trace_ids) == 2 + 2 * 2
    trace_ids = {f"{s.context.trace_id:032x}" for s in spans if s.context is not None}
    assert trace_ids == {t.trace_id for t in traffic.answered} | set(traffic.other_trace_ids)
    index_build = traffic.other_trace_ids[:2]
    assert all(kept[trace_id] for trace_id in index_build), "GenAI spans, kept at decode"
    assert all(map_trace(kept[trace_id]) is None for trace_id in traffic.other_trace_ids)


def test_a_request_is_an_http_root_over_chain_retriever_and_llm_with_plain_spans_around(
    recorded: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = recorded
    answered = answer_request(provider.get_tracer("test"), QUESTION)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    kinds = {name: (span.attributes or {}).get(KIND) for name, span in spans.items()}

    root = spans["POST /chat"]
    assert root.parent is None
    assert root.kind is SpanKind.SERVER
    assert kinds == {
        "POST /chat": None, "RetrieverQueryEngine.query": "CHAIN",
        "SELECT chat_history": None, "VectorIndexRetriever.retrieve": "RETRIEVER",
        "SELECT embeddings": None, "OpenAI.chat": "LLM", "POST": None, "INSERT chat_log": None,
    }
    chain = spans["RetrieverQueryEngine.query"]
    assert chain.parent is not None
    assert root.context is not None
    assert chain.parent.span_id == root.context.span_id
    assert chain.context is not None
    assert f"{chain.context.span_id:016x}" == answered.answer_span_id
    for child in ("VectorIndexRetriever.retrieve", "OpenAI.chat"):
        parent = spans[child].parent
        assert parent is not None
        assert parent.span_id == chain.context.span_id
    # The plain spans carry no GenAI content, so the worker drops them at decode.
    decoded = decode_otlp(records_for(list(spans.values()), "otlp_proto")[0].value, "otlp_proto")
    assert {span.name for span in decoded.kept} == {
        "RetrieverQueryEngine.query", "VectorIndexRetriever.retrieve", "OpenAI.chat"}
    assert decoded.dropped == 5
    assert decoded.roots_seen == {answered.trace_id}


def test_the_llm_call_carries_the_context_and_the_reply_as_messages(
    recorded: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = recorded
    answer_request(provider.get_tracer("test"), QUESTION)
    [llm] = [s for s in exporter.get_finished_spans()
             if (s.attributes or {}).get(KIND) == OpenInferenceSpanKindValues.LLM.value]
    attributes = llm.attributes or {}
    inputs, outputs = SpanAttributes.LLM_INPUT_MESSAGES, SpanAttributes.LLM_OUTPUT_MESSAGES
    assert attributes[f"{inputs}.0.message.role"] == "system"
    assert attributes[f"{inputs}.1.message.role"] == "user"
    user = str(attributes[f"{inputs}.1.message.content"])
    assert "Dune is by Frank Herbert." in user
    assert "Who wrote Dune?" in user
    assert attributes[f"{outputs}.0.message.content"] == "Frank Herbert."


def test_a_row_keeps_its_document_ids_and_an_answerless_row_answers_empty() -> None:
    row = LabelledRow(line=3, id="row-3", input="Q?", output=None, label="ungrounded",
                      documents=["plain text", {"id": "kb-7", "content": "with an id"}])
    request = from_labelled(row)
    assert request.documents == (RetrievedDocument("row-3-doc-0", "plain text"),
                                 RetrievedDocument("kb-7", "with an id"))
    assert request.answer == ""
    assert request.label == "ungrounded"


def test_without_plain_traffic_only_the_index_build_is_emitted_beside_the_requests(
    recorded: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, _ = recorded
    traffic: EmittedTraffic = emit_traffic(provider.get_tracer("test"), [QUESTION], plain_every=0)
    assert len(traffic.answered) == 1
    assert len(traffic.other_trace_ids) == 2
