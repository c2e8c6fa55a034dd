"""The demo's RAG service as the OTel GenAI instrumentation traces it (scripts/openai_v2_spans.py),
read back by the worker's own decoding and mapping: from the spans alone no trace has an
answer; with its log records joined (the logs topic, ``OTLP_LOGS_TOPIC``) every sample row maps
to its question and answer, judged against the prompt that carries its documents; the index
build, health checks and API calls map to nothing, with log records or without."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from consumer.inputs.formats import FORMATS, SpanFormat
from consumer.jsonl import read_labelled
from consumer.telemetry.conventions import map_trace
from consumer.telemetry.log_events import join_logs
from consumer.telemetry.mapped_trace import MappedTrace
from consumer.telemetry.spans import LogEvent, Span
from scripts import log_transport
from scripts.openai_v2_spans import INSTRUMENTATION_SCOPE, OpenAIv2Service, system_prompt
from scripts.rag_spans import RagRequest, RetrievedDocument, from_labelled, resource
from scripts.span_transport import ENCODINGS, SpanEncoding, records_for

DUNE = RagRequest("r-1", "Who wrote Dune?",
                  (RetrievedDocument("d-1", "Dune is by Frank Herbert."),
                   RetrievedDocument("d-2", "Dune was published in 1965.")),
                  "Frank Herbert.", "grounded")


@dataclass
class Recorded:
    """The service, and every span and log record it made, as the SDK recorded them."""

    service: OpenAIv2Service
    tracer_provider: TracerProvider
    spans: InMemorySpanExporter
    logs: InMemoryLogRecordExporter

    def finished(self) -> tuple[list[ReadableSpan], list[ReadableLogRecord]]:
        return list(self.spans.get_finished_spans()), list(self.logs.get_finished_logs())


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=resource())
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    logs = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    logger_provider = LoggerProvider(resource=resource())
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    service = OpenAIv2Service(logger_provider.get_logger(INSTRUMENTATION_SCOPE))
    yield Recorded(service, tracer_provider, spans, logs)
    tracer_provider.shutdown()
    logger_provider.shutdown()


def read_back(spans: list[ReadableSpan], logs: list[ReadableLogRecord],
              encoding: SpanEncoding) -> dict[str, MappedTrace | None]:
    """Each trace as the worker maps it: its kept spans from the spans topic's records, with
    the GenAI log events from the logs topic's joined (none given: the spans alone)."""
    fmt = FORMATS[encoding]
    assert isinstance(fmt, SpanFormat)
    decode, decode_logs = fmt.decoder(), fmt.logs_decoder()
    kept: dict[str, list[Span]] = defaultdict(list)
    events: dict[str, list[LogEvent]] = defaultdict(list)
    for record in records_for(spans, encoding):
        for span in decode(record.value).kept:
            kept[span.trace_id].append(span)
    for record in log_transport.records_for(logs, encoding):
        for event in decode_logs(record.value).logs:
            events[event.trace_id].append(event)
    return {trace_id: map_trace(join_logs(trace, events[trace_id]))
            for trace_id, trace in kept.items()}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_every_sample_row_maps_to_its_question_and_answer_once_its_log_records_join(
    recorded: Recorded, encoding: SpanEncoding,
) -> None:
    requests = [from_labelled(row) for row in read_labelled()]
    traffic = recorded.service.emit_traffic(recorded.tracer_provider.get_tracer("t"), requests)
    spans, logs = recorded.finished()
    joined = read_back(spans, logs, encoding)
    alone = read_back(spans, [], encoding)

    assert len(traffic.answered) == len(requests) == 514
    mismatched = []
    for answered in traffic.answered:
        request = answered.request
        trace = joined[answered.trace_id]
        assert trace is not None, request.request_id
        # The documents reach the judge inside the prompt: the system message, then the user's.
        prompt = [system_prompt(request.documents), request.question]
        if (trace.answer, trace.input, [d.content for d in trace.documents],
                trace.answer_span_id, trace.context_source) != (
                request.answer, request.question, prompt, answered.answer_span_id, "llm_input"):
            mismatched.append(request.request_id)
        # Without the logs topic the same trace is a chat call with nothing said.
        without = alone[answered.trace_id]
        assert without is not None
        assert (without.answer, without.input, without.documents) == ("", None, ())
    assert mismatched == []


def test_no_span_carries_the_content_and_every_log_record_is_of_a_chat_span(
    recorded: Recorded,
) -> None:
    traffic = recorded.service.emit_traffic(recorded.tracer_provider.get_tracer("t"),
                                            [DUNE] * 4, plain_every=2)
    spans, logs = recorded.finished()
    texts = [DUNE.question, DUNE.answer, *(doc.content for doc in DUNE.documents)]
    values = [str(value) for span in spans for value in (span.attributes or {}).values()]
    assert not [text for text in texts if any(text in value for value in values)]

    chats = {(span.context.trace_id, span.context.span_id) for span in spans
             if span.context is not None and span.name == "chat gpt-4o-mini"}
    assert len(chats) == 4
    assert {(log.log_record.trace_id, log.log_record.span_id) for log in logs} == chats
    names = [log.log_record.event_name for log in logs]
    assert names == ["gen_ai.system.message", "gen_ai.user.message", "gen_ai.choice"] * 4
    assert {log.instrumentation_scope.name for log in logs
            if log.instrumentation_scope is not None} == {INSTRUMENTATION_SCOPE}
    # The index build (an embeddings call) and the plain traffic log nothing and map to
    # nothing; each request's chat span is its answer's.
    other = set(traffic.other_trace_ids)
    assert len(other) == 1 + 2 * 2
    joined = read_back(spans, logs, "otlp_proto")
    assert all(joined.get(trace_id) is None for trace_id in other)
    assert {f"{span_id:016x}" for _, span_id in chats} == {
        t.answer_span_id for t in traffic.answered}


def test_a_request_is_an_http_root_over_the_retrieval_query_and_the_chat_call(
    recorded: Recorded,
) -> None:
    recorded.service.answer_request(recorded.tracer_provider.get_tracer("t"), DUNE)
    spans, logs = recorded.finished()
    by_name = {span.name: span for span in spans}
    assert list(by_name) == ["SELECT embeddings", "POST", "chat gpt-4o-mini", "INSERT chat_log",
                             "POST /chat"]  # in the order they ended
    root, chat = by_name["POST /chat"], by_name["chat gpt-4o-mini"]
    assert root.parent is None
    assert chat.kind is SpanKind.CLIENT
    assert chat.parent is not None
    assert root.context is not None
    assert chat.parent.span_id == root.context.span_id
    attributes = chat.attributes or {}
    assert (attributes["gen_ai.operation.name"], attributes["gen_ai.system"],
            attributes["gen_ai.request.model"]) == ("chat", "openai", "gpt-4o-mini")
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    bodies = [log.log_record.body for log in logs]
    assert bodies[0] == {"content": system_prompt(DUNE.documents)}
    assert bodies[1] == {"content": "Who wrote Dune?"}
    assert bodies[2] == {"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "Frank Herbert."}}
    assert all(log.log_record.attributes == {"gen_ai.system": "openai"} for log in logs)


def test_the_system_prompt_lists_each_document_by_its_id() -> None:
    prompt = system_prompt(DUNE.documents)
    assert "Document d-1:\nDune is by Frank Herbert.\n\nDocument d-2:\nDune was published" in (
        prompt)
    assert system_prompt(()).endswith("say that you do not know.")
