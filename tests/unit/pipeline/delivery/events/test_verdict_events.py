"""Verdicts as ``gen_ai.evaluation.result`` events: what a tracing backend receives for each
verdict, on which trace and span, and that a slow or down exporter only loses events, counted,
never a verdict nor the pipeline's time."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime

import pytest
import structlog
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    InMemoryLogRecordExporter,
    LogRecordExporter,
    LogRecordExportResult,
)

from consumer import wiring
from consumer.errors import ConfigError, PublishError
from consumer.judge.result import Answered, TraceFailed
from consumer.ops import metrics
from consumer.pipeline.delivery.events import export
from consumer.pipeline.delivery.events.attributes import EVENT_NAME
from consumer.pipeline.delivery.events.export import BoundedExport
from consumer.pipeline.delivery.events.sink import EventingSink, VerdictEvents
from consumer.redaction import known_secrets, redact
from consumer.rules.verdicts import Context, checked, errored, judged
from consumer.settings import load_settings
from consumer.telemetry.origin import TraceOrigin
from schemas.judge import JudgeAnswer
from schemas.trace import TraceEvent
from schemas.verdict import Source, Truncation, VerdictEvent
from tests.support.pipeline_fakes import Rec
from tests.support.ports import free_port
from tests.support.verdict_sinks import Emitted, Sink

OTEL_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
OTEL_SPAN = "00f067aa0ba902b7"
SOURCE = Source(topic="llm-traces", partition=0, offset=7)
KEY = "sk-test-0123456789abcdef"


def ctx(origin: TraceOrigin | None = None, secrets: tuple[str, ...] = ()) -> Context:
    return Context("gpt-4o-mini", 0.75, Truncation(), SOURCE, secrets=secrets, origin=origin)


def answered(score: int, reason: str, claims: Sequence[str] = ()) -> Answered:
    return Answered(JudgeAnswer(score=score, reason=reason, unsupported_claims=list(claims)),
                    None, 40, 1)


class Captured:
    """Events as the exporter receives them, and the drops reported."""

    def __init__(self, exporter: LogRecordExporter | None = None, max_queue: int = 64) -> None:
        self.memory = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
        self.drops: list[int] = []
        self.export = BoundedExport(exporter or self.memory, self.drops.append,
                                    max_queue=max_queue)
        self.events = VerdictEvents(self.export)

    def sent(self, verdict: VerdictEvent) -> ReadableLogRecord:
        self.events.emit(verdict)
        assert self.events.flush(30)
        (record,) = self.memory.get_finished_logs()
        return record


@pytest.fixture
def captured() -> Iterator[Captured]:
    made = Captured()
    yield made
    made.export.close(5)


def test_a_judged_verdict_becomes_the_conventions_event(captured: Captured) -> None:
    trace = TraceEvent(trace_id=OTEL_TRACE, span_id=OTEL_SPAN, output="It opened in 1887.")
    verdict = judged(trace, answered(2, "the date is not in the documents",
                                     ["It opened in 1887."]), ctx())
    record = captured.sent(verdict).log_record
    assert record.event_name == EVENT_NAME
    assert dict(record.attributes or {}) == {
        "gen_ai.evaluation.name": "groundedness",
        "gen_ai.evaluation.score.value": 0.25,
        "gen_ai.evaluation.score.label": "fail",
        "gen_ai.evaluation.explanation": "the date is not in the documents",
        "groundedness.verdict_id": verdict.verdict_id,
        "groundedness.trace_id": OTEL_TRACE,
        "groundedness.prompt_version": verdict.prompt_version,
        "groundedness.judge_model": "gpt-4o-mini",
        "groundedness.unsupported_claims": ("It opened in 1887.",),
    }
    # On the judged answer's span of the judged trace: where a tracing UI shows it.
    assert (record.trace_id, record.span_id) == (int(OTEL_TRACE, 16), int(OTEL_SPAN, 16))
    # At the time of the judging, not when the collector received it.
    judged_at = datetime.fromisoformat(verdict.evaluated_at)
    assert record.timestamp == int(judged_at.timestamp() * 1_000_000) * 1000


def test_a_verdict_from_spans_sits_on_its_answer_span(captured: Captured) -> None:
    origin = TraceOrigin(span_id=OTEL_SPAN, project_id="rag", session_id=None,
                         context_source="retrieval", spans=3, root_seen=True, closed_by="quiet")
    verdict = judged(TraceEvent(trace_id=OTEL_TRACE, output="a"), answered(5, "supported"),
                     ctx(origin))
    record = captured.sent(verdict).log_record
    assert (record.trace_id, record.span_id) == (int(OTEL_TRACE, 16), int(OTEL_SPAN, 16))
    assert (record.attributes or {})["gen_ai.evaluation.score.label"] == "pass"


@pytest.mark.parametrize(
    ("trace_id", "span_id"),
    [
        pytest.param("rag-support-017", OTEL_SPAN, id="trace-id-not-otel"),
        pytest.param(OTEL_TRACE, None, id="no-span-id"),
        pytest.param(OTEL_TRACE, "not-a-span-id", id="span-id-not-hex"),
        pytest.param(OTEL_TRACE, "0000000000000000", id="span-id-all-zero"),
    ],
)
def test_a_trace_json_verdict_without_both_otel_ids_has_no_trace_context(
    captured: Captured, trace_id: str, span_id: str | None
) -> None:
    trace = TraceEvent.model_validate({"trace_id": trace_id, "span_id": span_id, "output": "a"})
    record = captured.sent(judged(trace, answered(5, "ok"), ctx())).log_record
    assert (record.trace_id, record.span_id) == (0, 0)  # not the worker's own context
    assert (record.attributes or {})["groundedness.trace_id"] == trace_id


def test_a_trace_json_verdict_is_unchanged_unless_the_event_gives_a_span() -> None:
    without = judged(TraceEvent(trace_id=OTEL_TRACE, output="a"), answered(5, "ok"), ctx())
    assert "span_id" not in without.model_dump(mode="json")
    given = TraceEvent.model_validate(
        {"trace_id": OTEL_TRACE, "span_id": OTEL_SPAN.upper(), "output": "a"})
    assert judged(given, answered(5, "ok"), ctx()).span_id == OTEL_SPAN


def test_an_error_verdict_has_no_score_and_explains_its_error(captured: Captured) -> None:
    trace = TraceEvent(trace_id=OTEL_TRACE, span_id=OTEL_SPAN, output="a")
    verdict = errored(trace, TraceFailed("judge_http_400", "bad request", None, 5, 1), ctx())
    attributes = dict(captured.sent(verdict).log_record.attributes or {})
    assert attributes["gen_ai.evaluation.score.label"] == "error"
    assert "gen_ai.evaluation.score.value" not in attributes
    assert attributes["error.type"] == "judge_http_400"
    assert attributes["gen_ai.evaluation.explanation"] == "judge_http_400: bad request"


def test_a_deterministic_rule_has_no_judge_model(captured: Captured) -> None:
    trace = TraceEvent(trace_id=OTEL_TRACE, span_id=OTEL_SPAN, output="a")
    ruled = Context(None, None, Truncation(), SOURCE, rule="missing_citation",
                    prompt_version="missing_citation@v1")
    attributes = dict(captured.sent(checked(trace, False, "no citation", ruled))
                      .log_record.attributes or {})
    assert attributes["gen_ai.evaluation.name"] == "missing_citation"
    assert attributes["gen_ai.evaluation.score.value"] == 0.0
    assert "groundedness.judge_model" not in attributes


def test_a_secret_the_judge_quoted_never_reaches_the_event(captured: Captured) -> None:
    trace = TraceEvent(trace_id=OTEL_TRACE, span_id=OTEL_SPAN, output="a")
    verdict = judged(trace, answered(1, f"the key {KEY} is not a source", [f"uses {KEY}"]),
                     ctx(secrets=(KEY,)))
    record = captured.sent(verdict)
    assert KEY not in record.to_json()


class Stuck(LogRecordExporter):
    """An endpoint that does not answer: each export waits until released or shut down."""

    def __init__(self, result: LogRecordExportResult = LogRecordExportResult.SUCCESS) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.result = result
        self.exported = 0
        self.shut = False

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        self.entered.set()
        self.release.wait()
        if self.shut:  # as the OTLP exporter refuses once shut down
            return LogRecordExportResult.FAILURE
        self.exported += len(batch)
        return self.result

    def shutdown(self) -> None:
        self.shut = True
        self.release.set()  # as the OTLP exporter's shutdown ends its retries

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def verdicts(count: int) -> list[VerdictEvent]:
    return [judged(TraceEvent(trace_id=f"t-{i}", output="a"), answered(5, "ok"), ctx())
            for i in range(count)]


def test_a_full_queue_drops_and_counts_without_waiting() -> None:
    stuck = Stuck()
    made = Captured(stuck, max_queue=4)
    first, *rest = verdicts(8)
    made.events.emit(first)
    assert stuck.entered.wait(30)  # the export thread holds the first, waiting on the endpoint
    for verdict in rest:  # 7 more: 4 fit the queue, 3 find it full (and emit returns at once)
        made.events.emit(verdict)
    assert made.drops == [1, 1, 1]
    stuck.release.set()
    assert made.events.flush(30)
    assert (stuck.exported, sum(made.drops)) == (5, 3)
    made.export.close(5)


def test_events_whose_export_fails_are_counted_dropped() -> None:
    failing = Stuck(LogRecordExportResult.FAILURE)
    failing.release.set()
    made = Captured(failing)
    for verdict in verdicts(5):
        made.events.emit(verdict)
    assert made.events.flush(30)
    assert sum(made.drops) == 5
    made.export.close(5)


async def test_close_is_bounded_and_counts_what_was_never_sent() -> None:
    stuck = Stuck()
    made = Captured(stuck)
    first, *rest = verdicts(4)
    made.events.emit(first)
    assert stuck.entered.wait(30)
    for verdict in rest:
        made.events.emit(verdict)
    await made.events.close(0.05)  # the endpoint never answers: close gives up, shuts it
    assert stuck.shut
    made.events.emit(first)  # after close: dropped at once
    assert made.events.flush(30)
    # The held one, the 3 queued and the late one: none sent, all counted.
    assert (stuck.exported, sum(made.drops)) == (0, 5)


class Hung(Stuck):
    """An endpoint whose request outlives the exporter's shutdown (it waits out its own
    timeout), until released by the test; then it fails."""

    def shutdown(self) -> None:
        self.shut = True


async def test_a_batch_whose_request_outlives_close_is_counted_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(export, "SHUTDOWN_GRACE_S", 0.05)
    hung = Hung()
    made = Captured(hung)
    first, *rest = verdicts(4)
    made.events.emit(first)
    assert hung.entered.wait(30)
    for verdict in rest:
        made.events.emit(verdict)
    with structlog.testing.capture_logs() as logs:
        await made.events.close(0.05)
    # The batch in flight (1) and the 3 queued: counted and logged when close gives up,
    # since the process may end before the request does.
    assert sum(made.drops) == 4
    assert [entry["dropped"] for entry in logs if entry["event"] == "verdict_events_unsent"] == [4]
    hung.release.set()  # the request ends after all, failed: not counted a second time
    made.export._thread.join(30)
    assert not made.export._thread.is_alive()
    assert (hung.exported, sum(made.drops)) == (0, 4)


async def test_an_event_follows_only_an_acknowledged_verdict() -> None:
    verdict, = verdicts(1)
    refusing, emitted = Sink(refuse=True), Emitted()
    sink = EventingSink(refusing, emitted)
    with pytest.raises(PublishError):
        await sink.publish(verdict)
    assert emitted.verdicts == []  # the pipeline retries; the retry that lands emits it
    refusing.refuse = False
    await sink.publish(verdict)
    assert emitted.verdicts == [verdict] == refusing.published
    await sink.dead_letter(Rec("llm-traces", 0, 1, 0, None, b"{", []), "not JSON")
    assert (refusing.dead_letters, len(emitted.verdicts)) == (1, 1)


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_HEADERS",
                                      "OTEL_EXPORTER_OTLP_LOGS_HEADERS"])
def test_otlp_header_values_are_secrets_and_short_ones_stay_words(
    monkeypatch: pytest.MonkeyPatch, variable: str,
) -> None:
    headers = f'x-tenant=prod,authorization="Bearer {KEY}",x-token=tok%2F{KEY[:10]}'
    monkeypatch.setenv(variable, headers)
    secrets = load_settings(require_threshold=False).secrets()
    assert {KEY, f"Bearer {KEY}", f"tok/{KEY[:10]}"} <= set(secrets)
    known = known_secrets(secrets)
    assert not {"prod", "Bearer", "x-tenant", "authorization"} & set(known), "words, not keys"
    line = f"Header format invalid! ...: authorization=\"Bearer {KEY}\" (tenant prod)"
    assert redact(line, known_secrets(secrets)) == (
        "Header format invalid! ...: authorization=[REDACTED] (tenant prod)")


def test_verdict_events_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.delenv("VERDICT_EVENTS", raising=False)
    assert wiring.verdict_events(load_settings()) is None
    monkeypatch.setenv("VERDICT_EVENTS", " OTLP ")
    assert load_settings().verdict_events == "otlp"
    monkeypatch.setenv("VERDICT_EVENTS", "jaeger")
    with pytest.raises(ConfigError) as refused:
        load_settings()
    assert str(refused.value) == ("VERDICT_EVENTS: Input should be 'none' or 'otlp' "
                                  "(got 'jaeger')")


async def test_otlp_events_to_an_endpoint_nobody_serves_are_counted_in_the_metric(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Nothing listens: every export fails, and is counted in the worker's metric.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv("VERDICT_EVENTS", "otlp")
    events = wiring.verdict_events(load_settings())
    assert events is not None
    before = dropped()
    events.emit(verdicts(1)[0])
    await asyncio.to_thread(events.flush, 30)
    await events.close()
    assert dropped() == before + 1


def dropped() -> float:
    value = metrics.REGISTRY.get_sample_value("groundedness_verdict_events_dropped_total")
    assert value is not None  # the series exists from the start, at 0
    return value
