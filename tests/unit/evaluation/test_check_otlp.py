"""`groundedness check` on OTLP JSON: real SDK spans, encoded by the SDK's own OTLP encoder and
written as the collector's file exporter writes them (one request per line) or saved as one
document, judged by the fake judge through the real command."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from openinference.semconv.trace import (
    DocumentAttributes,
    MessageAttributes,
    OpenInferenceSpanKindValues,
    SpanAttributes,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from consumer.cli import main
from tests.support.genai_logs import LoggedChats, logs_json
from tests.support.otel_spans import KIND, Recorder, otlp_json, otlp_proto
from tests.unit.evaluation.conftest import Judge, notes, verdict_lines


class App:
    """An instrumented RAG service: each request is one trace of real SDK spans."""

    def __init__(self) -> None:
        self.recorder = Recorder()
        self.tracer = self.recorder.tracer

    def ask(self, question: str, answer: str) -> list[ReadableSpan]:
        """HTTP root, OpenInference chain, a database span, retriever, LLM: in end order."""
        tracer = self.tracer
        with (
            tracer.start_as_current_span("POST /ask", kind=SpanKind.SERVER),
            tracer.start_as_current_span("query") as chain,
        ):
            chain.set_attributes({KIND: OpenInferenceSpanKindValues.CHAIN.value,
                                  SpanAttributes.INPUT_VALUE: question})
            with tracer.start_as_current_span("SELECT docs", kind=SpanKind.CLIENT) as db:
                db.set_attribute("db.system", "postgresql")
            with tracer.start_as_current_span("retrieve") as retriever:
                prefix = f"{SpanAttributes.RETRIEVAL_DOCUMENTS}.0."
                retriever.set_attributes({
                    KIND: OpenInferenceSpanKindValues.RETRIEVER.value,
                    prefix + DocumentAttributes.DOCUMENT_CONTENT: "Dune is by Frank Herbert.",
                })
            with tracer.start_as_current_span("chat") as llm:
                message = f"{SpanAttributes.LLM_OUTPUT_MESSAGES}.0."
                llm.set_attributes({
                    KIND: OpenInferenceSpanKindValues.LLM.value,
                    message + MessageAttributes.MESSAGE_ROLE: "assistant",
                    message + MessageAttributes.MESSAGE_CONTENT: answer,
                })
            chain.set_attribute(SpanAttributes.OUTPUT_VALUE, answer)
        return self.recorder.spans()

    def index(self) -> list[ReadableSpan]:
        """Indexing work: GenAI spans (an embedding) with no answer to a user."""
        with self.tracer.start_as_current_span("embed") as embed:
            embed.set_attribute(KIND, OpenInferenceSpanKindValues.EMBEDDING.value)
        return self.recorder.spans()

    def health(self) -> list[ReadableSpan]:
        """A plain HTTP request: no GenAI span."""
        with self.tracer.start_as_current_span("GET /health", kind=SpanKind.SERVER):
            pass
        return self.recorder.spans()


def request_line(spans: list[ReadableSpan]) -> str:
    """One ``ExportTraceServiceRequest`` as OTLP JSON on one line (the collector's file
    exporter)."""
    return otlp_json(otlp_proto(spans)).decode()


def write_lines(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def hex_trace_id(spans: list[ReadableSpan]) -> str:
    return f"{spans[0].context.trace_id:032x}"


def hex_span_id(spans: list[ReadableSpan], name: str) -> str:
    (span,) = [span for span in spans if span.name == name]
    return f"{span.context.span_id:016x}"


def test_collector_file_exporter_lines_are_judged_as_the_worker_judges_spans(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = App()
    passing = app.ask("Who wrote Dune?", "Frank Herbert. [[score=5]]")
    failing = app.ask("Who wrote Emma?", "Frank Herbert. [[score=1]]")
    empty = app.ask("Who wrote Ulysses?", "  ")
    indexing = app.index()
    # The failing trace's spans come in two requests, its root (which ends last) in the second.
    path = write_lines(tmp_path / "spans.jsonl", request_line(passing + indexing),
                       request_line(failing[:3]), request_line(empty),
                       request_line(failing[3:]))

    code = main(["check", str(path)])

    captured = capsys.readouterr()
    verdicts = verdict_lines(captured.out)
    assert [(v["trace_id"], v["verdict"]) for v in verdicts] == [
        (hex_trace_id(passing), "pass"), (hex_trace_id(failing), "fail")]
    for verdict, spans in zip(verdicts, (passing, failing), strict=True):
        # As the live path sets them: the answer's span (the chain's output.value), the
        # service, the documents as context, and a trace whose root arrived closed when quiet.
        assert verdict["span_id"] == hex_span_id(spans, "query")
        assert verdict["project_id"] == "rag-api"
        assert verdict["context_source"] == "retrieval"
        assert verdict["assembly"] == {"spans": 3, "root_seen": True, "closed_by": "quiet",
                                       "capped": 0}
        assert verdict["source"] is None
        assert "session_id" not in verdict
    assert notes(captured.err) == [f"check: line 3: trace '{hex_trace_id(empty)}' has an "
                                   "empty answer: not evaluated, no verdict"]
    assert code == 0


def test_a_trace_whose_answer_is_found_nowhere_is_named_and_counted_apart(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """openai-v2 with its content in log records the file does not hold: the chat span alone."""
    app = App()
    answered = app.ask("Who wrote Dune?", "Frank Herbert. [[score=5]]")
    with app.tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT) as chat:
        chat.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.system": "openai",
                             "gen_ai.request.model": "gpt-4o-mini"})
    unanswered = app.recorder.spans()
    path = write_lines(tmp_path / "spans.jsonl", request_line(answered),
                       request_line(unanswered))

    code = main(["check", str(path)])

    captured = capsys.readouterr()
    assert [v["trace_id"] for v in verdict_lines(captured.out)] == [hex_trace_id(answered)]
    assert notes(captured.err) == [
        f"check: line 2: trace '{hex_trace_id(unanswered)}': no answer found on its LLM spans "
        "or their log records (they carry gen_ai.operation.name, gen_ai.request.model, "
        "gen_ai.system): not evaluated, no verdict"]
    assert "check: left out: 1 no answer found in the spans" in captured.err.splitlines()
    assert code == 0


def test_log_record_lines_join_their_traces_as_the_logs_topic_does(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The collector's traces and logs pipelines written to one file (or one appended to the
    other): openai-v2's content is in the log record lines, read with their chat spans."""
    chats = LoggedChats()
    first = chats.chat("Who wrote Dune?", "Frank Herbert. [[score=5]]")
    second = chats.chat("Who wrote Emma?", "Frank Herbert. [[score=1]]")
    path = write_lines(tmp_path / "otel.jsonl",
                       logs_json(first.logs_value()).decode(),
                       request_line(first.spans + second.spans),
                       logs_json(second.logs_value()).decode())

    code = main(["check", str(path)])

    captured = capsys.readouterr()
    verdicts = verdict_lines(captured.out)
    assert [(v["trace_id"], v["verdict"]) for v in verdicts] == [
        (first.trace_id, "pass"), (second.trace_id, "fail")]
    assert {v["span_id"] for v in verdicts} == {first.chat_span_id, second.chat_span_id}
    assert {v["context_source"] for v in verdicts} == {"llm_input"}
    assert notes(captured.err) == []
    assert code == 0


def test_one_pretty_printed_document_is_read_whole(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = App()
    first = app.ask("Who wrote Dune?", "Frank Herbert.")
    second = app.ask("Who wrote Emma?", "Jane Austen. [[score=2]]")
    path = tmp_path / "export.json"
    path.write_text(json.dumps(json.loads(otlp_json(otlp_proto(first + second))), indent=2))

    code = main(["check", str(path)])

    verdicts = verdict_lines(capsys.readouterr().out)
    assert [(v["trace_id"], v["verdict"]) for v in verdicts] == [
        (hex_trace_id(first), "pass"), (hex_trace_id(second), "fail")]
    assert code == 0


def test_a_trace_whose_root_is_missing_is_judged_with_what_arrived(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spans = App().ask("Who wrote Dune?", "Frank Herbert.")
    without_root = [span for span in spans if span.name != "POST /ask"]
    path = write_lines(tmp_path / "spans.jsonl", request_line(without_root))

    assert main(["check", str(path)]) == 0

    (verdict,) = verdict_lines(capsys.readouterr().out)
    assert verdict["assembly"] == {"spans": 3, "root_seen": False, "closed_by": "max_wait",
                                   "capped": 0}


def test_bad_lines_are_named_and_the_rest_still_judged(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = App()
    good = app.ask("Who wrote Dune?", "Frank Herbert.")
    damaged = app.ask("Who wrote Emma?", "Jane Austen.")
    document = json.loads(request_line(damaged))
    for span in document["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        if span["name"] == "retrieve":  # one span of the batch is broken, not the batch
            span["attributes"].append({"key": "retrieval.top_k", "value": {"intValue": "ten"}})
    path = write_lines(tmp_path / "spans.jsonl", request_line(good), "not json",
                       json.dumps({"trace_id": "t1", "output": "a trace event"}),
                       json.dumps(document))

    code = main(["check", str(path)])

    captured = capsys.readouterr()
    verdicts = verdict_lines(captured.out)
    assert [v["trace_id"] for v in verdicts] == [hex_trace_id(good), hex_trace_id(damaged)]
    # The damaged trace lost its retriever: judged on its LLM input, with two spans.
    assert verdicts[1]["assembly"]["spans"] == 2
    assert verdicts[1]["context_source"] == "llm_input"
    problems = notes(captured.err)
    assert [line.split(":")[:2] for line in problems] == [
        ["check", " line 2"], ["check", " line 3"], ["check", " line 4"]]
    assert "not JSON" in problems[0]
    assert "no resourceSpans" in problems[1]
    assert "1 unreadable span(s) left out" in problems[2]
    assert "intValue" in problems[2]
    assert code == 1


@pytest.mark.parametrize(
    ("spans", "message"),
    [
        pytest.param(lambda app: app.health() + app.health(),
                     "none of the 2 spans read has an OpenInference span kind", id="http-only"),
        pytest.param(lambda app: app.index(),
                     "1 trace(s) of GenAI spans, none with an LLM call", id="indexing-only"),
    ],
)
def test_a_file_without_a_genai_trace_says_so_and_exits_1(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str], spans: Any, message: str
) -> None:
    judge, _ = env
    path = write_lines(tmp_path / "spans.jsonl", request_line(spans(App())))

    code = main(["check", str(path)])

    captured = capsys.readouterr()
    assert captured.out == ""
    (problem,) = captured.err.splitlines()
    assert problem.startswith("check: no GenAI trace to judge: ")
    assert message in problem
    assert judge.count() == 0
    assert code == 1


def test_format_chooses_over_detection(
    env: Judge, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spans = App().ask("Who wrote Dune?", "Frank Herbert.")
    # The first line is garbage: auto looks on to the first JSON object, --format needs not.
    path = write_lines(tmp_path / "spans.jsonl", "{garbage", request_line(spans))
    assert main(["check", str(path)]) == 1
    assert [v["trace_id"] for v in verdict_lines(capsys.readouterr().out)] == [
        hex_trace_id(spans)]

    assert main(["check", "--format", "trace_json", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "line 2: " in captured.err  # an OTLP line is no trace event

    events = write_lines(tmp_path / "events.jsonl", json.dumps({"trace_id": "t", "output": "x"}))
    assert main(["check", "--format", "otlp_json", str(events)]) == 1
    assert "line 1: otlp_json record holds no resourceSpans" in capsys.readouterr().err


def test_stdin(env: Judge, monkeypatch: pytest.MonkeyPatch,
               capsys: pytest.CaptureFixture[str]) -> None:
    spans = App().ask("Who wrote Dune?", "Frank Herbert.")
    data = (request_line(spans) + "\n").encode()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    assert main(["check", "-"]) == 0
    assert [v["trace_id"] for v in verdict_lines(capsys.readouterr().out)] == [
        hex_trace_id(spans)]
