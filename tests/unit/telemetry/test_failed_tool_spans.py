"""A tool span that failed, as the OTel SDK records it (status ERROR, an ``exception`` event,
``error.type``), decoded and mapped: the call counts, and the rule's reason says it failed."""

from __future__ import annotations

import pytest
from openinference.semconv.trace import SpanAttributes
from opentelemetry.semconv.attributes import error_attributes, exception_attributes
from opentelemetry.trace import Status, StatusCode

from consumer.inputs import OtlpEncoding
from consumer.inputs.otlp import decode as otlp
from consumer.inputs.otlp.decode import decode_otlp
from consumer.rules.answered_without_tool import AnsweredWithoutTool
from consumer.telemetry.conventions import map_trace
from tests.support.otel_spans import KIND, Recorder, otlp_json, otlp_proto

SA = SpanAttributes


class UpstreamTimeout(Exception):
    """What a tool's HTTP client raises."""


def _agent_trace(fail: str) -> bytes:
    """An agent whose only tool call fails in the way ``fail`` names, then answers."""
    recorder = Recorder()
    tracer = recorder.tracer
    with tracer.start_as_current_span("agent", attributes={KIND: "AGENT",
                                                           SA.OUTPUT_VALUE: "Sorry."}):
        with tracer.start_as_current_span(
                "orders_api", attributes={KIND: "TOOL", SA.TOOL_NAME: "orders_api"},
                record_exception=False, set_status_on_exception=False) as tool:
            if fail == "exception":  # what the SDK does when the tool's code raises
                tool.record_exception(UpstreamTimeout("orders-api, 10 s"))
                tool.set_status(Status(StatusCode.ERROR))
            elif fail == "status-message":
                tool.set_status(Status(StatusCode.ERROR, "HTTP 503 from orders-api"))
            elif fail == "error-type":
                tool.set_attribute(error_attributes.ERROR_TYPE, "TimeoutError")
                tool.set_status(Status(StatusCode.ERROR))
            elif fail == "bare":
                tool.set_status(Status(StatusCode.ERROR))
            elif fail == "exception-but-ok":  # handled: the span says it succeeded
                tool.record_exception(UpstreamTimeout("retried"))
                tool.set_status(Status(StatusCode.OK))
        with tracer.start_as_current_span("llm", attributes={
                KIND: "LLM", f"{SA.LLM_OUTPUT_MESSAGES}.0.message.role": "assistant",
                f"{SA.LLM_OUTPUT_MESSAGES}.0.message.content": "Sorry."}):
            pass
    return otlp_proto(recorder.spans())


@pytest.mark.parametrize(
    ("fail", "error"),
    [
        pytest.param("exception", "tests.unit.telemetry.test_failed_tool_spans.UpstreamTimeout: "
                     "orders-api, 10 s", id="exception-event"),
        pytest.param("status-message", "HTTP 503 from orders-api", id="status-message"),
        pytest.param("error-type", "TimeoutError", id="error-type"),
        pytest.param("bare", "failed", id="status-alone"),
        pytest.param("exception-but-ok", None, id="handled-exception"),
        pytest.param("none", None, id="succeeded"),
    ],
)
@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_a_failed_tool_call_is_a_call_and_its_failure_is_named(
    fail: str, error: str | None, encoding: OtlpEncoding
) -> None:
    value = _agent_trace(fail)
    spans = decode_otlp(value if encoding == "otlp_proto" else otlp_json(value), encoding).kept
    mapped = map_trace(spans)
    assert mapped is not None
    [call] = mapped.tool_calls
    assert (call.name, call.error) == ("orders_api", error)
    trace = mapped.to_trace_event()
    outcome = AnsweredWithoutTool().check(trace, None)
    assert outcome.passed, "the tool was called, even if it failed"
    assert ("failed" in outcome.reason) is (error is not None), outcome.reason


def test_the_failure_names_are_the_published_conventions() -> None:
    assert otlp.ERROR_TYPE == error_attributes.ERROR_TYPE
    assert otlp.EXCEPTION_TYPE == exception_attributes.EXCEPTION_TYPE
    assert otlp.EXCEPTION_MESSAGE == exception_attributes.EXCEPTION_MESSAGE
