"""TRACE_FILTER: the documented examples on trace_json events and on traces from real spans,
JMESPath truthiness, malformed expressions refused in one line with their position, and an
expression failing on one trace leaving that trace out without stopping anything."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from consumer.cost.trace_filter import compile_filter, filter_view
from consumer.inputs.otlp.decode import decode_otlp
from consumer.telemetry.assembly import ClosedTrace
from consumer.telemetry.origin import TraceOrigin
from consumer.telemetry.trace_event import Candidate, candidate
from schemas.trace import TraceEvent
from tests.support.otel_spans import Recorder, otlp_proto, rag_trace


def event(**fields: Any) -> TraceEvent:
    return TraceEvent.model_validate({"trace_id": "t-1", "output": "An answer.", **fields})


def keeps(expression: str, trace: TraceEvent, origin: TraceOrigin | None = None) -> bool:
    return compile_filter(expression).keeps(filter_view(trace, origin))


def from_spans(service: str, **resource: str) -> Candidate:
    """One request of a RAG service, through the real SDK, the OTLP encoder and our decoder."""
    recorder = Recorder(service, **resource)
    rag_trace(recorder.tracer)
    decoded = decode_otlp(otlp_proto(recorder.spans()), "otlp_proto")
    closed = ClosedTrace(
        trace_id=decoded.kept[0].trace_id, spans=tuple(decoded.kept), root_seen=True,
        closed_by="quiet", span_count=len(decoded.kept), capped=0, first_offset=0,
    )
    found = candidate(closed)
    assert isinstance(found, Candidate)
    return found


# The documentation's examples.

def test_by_project() -> None:
    assert keeps("project_id == 'checkout'", event(project_id="checkout"))
    assert not keeps("project_id == 'checkout'", event(project_id="search"))
    assert not keeps("project_id == 'checkout'", event())


def test_by_environment_in_metadata() -> None:
    expression = "metadata.environment == 'production'"
    assert keeps(expression, event(metadata={"environment": "production"}))
    assert not keeps(expression, event(metadata={"environment": "staging"}))
    assert not keeps(expression, event())  # no metadata at all: null, not an error


def test_by_service_from_a_trace_json_events_metadata() -> None:
    expression = "service == 'support-bot'"
    assert keeps(expression, event(metadata={"service.name": "support-bot"}))
    assert keeps(expression, event(metadata={"service": "support-bot"}))
    # service.name first, as OTel names it; a value that is no string names no service.
    assert not keeps(expression, event(metadata={"service.name": "x", "service": "support-bot"}))
    assert filter_view(event(metadata={"service": 7}), None)["service"] is None
    assert not keeps(expression, event())


def test_by_service_and_project_on_a_trace_from_real_spans() -> None:
    found = from_spans("support-bot")
    assert found.origin.service == "support-bot"
    assert keeps("service == 'support-bot'", found.trace, found.origin)
    # Without a project attribute the project is the service, as on the verdict.
    assert keeps("project_id == 'support-bot'", found.trace, found.origin)
    assert not keeps("service == 'checkout'", found.trace, found.origin)
    assert keeps("length(retrieved_documents) > `0` && contains(output, 'Herbert')",
                 found.trace, found.origin)


@pytest.mark.parametrize("key", ["deployment.environment.name", "deployment.environment"])
def test_by_environment_on_a_trace_from_spans_as_in_trace_json_metadata(key: str) -> None:
    found = from_spans("support-bot", **{key: "production"})
    assert found.origin.environment == "production"
    assert keeps("metadata.environment == 'production'", found.trace, found.origin)
    assert keeps("metadata.environment == 'production'",
                 event(metadata={"environment": "production"}))
    staging = from_spans("support-bot", **{key: "staging"})
    assert not keeps("metadata.environment == 'production'", staging.trace, staging.origin)
    unset = from_spans("support-bot")
    assert unset.origin.environment is None
    assert not keeps("metadata.environment == 'production'", unset.trace, unset.origin)


def test_a_trace_from_spans_and_a_trace_json_event_show_the_same_fields() -> None:
    found = from_spans("rag-api")
    spans_view = filter_view(found.trace, found.origin)
    json_view = filter_view(event(), None)
    assert spans_view.keys() == json_view.keys()
    assert {"trace_id", "input", "output", "retrieved_documents", "metadata", "project_id",
            "session_id", "service", "tools_available", "tool_calls"} <= json_view.keys()
    assert spans_view["trace_id"] == found.trace.trace_id
    assert spans_view["retrieved_documents"][0]["content"] == "Dune is by Frank Herbert."


def test_the_origin_gives_project_and_session() -> None:
    origin = TraceOrigin(span_id="00000000000000aa", project_id="checkout", session_id="s-9",
                         context_source="retrieval", spans=3, root_seen=True, closed_by="quiet")
    assert keeps("project_id == 'checkout' && session_id == 's-9'", event(), origin)
    assert filter_view(event(), None)["session_id"] is None


# Truthiness is JMESPath's, not Python's.

@pytest.mark.parametrize(("expression", "kept"), [
    ("metadata.tags", False),  # []
    ("metadata.labels", False),  # {}
    ("metadata.note", False),  # ""
    ("metadata.flag", False),  # false
    ("metadata.missing", False),  # null
    ("metadata.count", True),  # 0: true in JMESPath
    ("metadata.tags[0]", False),
    ("`\"x\"`", True),
    ("retrieved_documents", True),
])
def test_truthiness_is_jmespaths(expression: str, kept: bool) -> None:
    trace = event(metadata={"tags": [], "labels": {}, "note": "", "flag": False, "count": 0},
                  retrieved_documents=["A document."])
    assert keeps(expression, trace) is kept


# Malformed expressions: refused at start, one line, the position.

@pytest.mark.parametrize(("expression", "message"), [
    ("metadata.environment == 'production' ]",
     "TRACE_FILTER: syntax error at position 37: unexpected token ']'"),
    ("project_id = 'checkout'", "TRACE_FILTER: syntax error at position 11: unknown token '='"),
    ("metadata.environment == 'production", "TRACE_FILTER: syntax error at position 24: "
     "unclosed ' delimiter"),
    ("metadata[?env == 'x'", "TRACE_FILTER: syntax error at position 20: "
     "the expression ends too soon"),
    ("metadata.", "TRACE_FILTER: syntax error at position 9: the expression ends too soon"),
    ("project_id service", "TRACE_FILTER: syntax error at position 11: "
     "unexpected token 'service'"),
    ("", "TRACE_FILTER: the expression is empty"),
    ("  ", "TRACE_FILTER: the expression is empty"),
    ("lenght(output) > `3`", "TRACE_FILTER: unknown function lenght() at position 0"),
    ("output && starts_with(output)",
     "TRACE_FILTER: starts_with() takes 2 argument(s), 1 given, at position 10"),
    ("lenght(`old`)", "TRACE_FILTER: unknown function lenght() at position 0"),
    ("merge()", "TRACE_FILTER: merge() takes at least 1 argument(s), 0 given, at position 0"),
    ("[" * 5000, "TRACE_FILTER: the expression is nested too deeply"),
])
def test_a_malformed_expression_is_refused_in_one_line(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=r"^TRACE_FILTER") as refused:
        compile_filter(expression)
    assert str(refused.value) == message


def test_a_literal_in_the_old_string_syntax_is_read_as_jmespath_reads_it() -> None:
    assert keeps("metadata.environment == `production`", event(metadata={"environment":
                                                                        "production"}))


def test_variadic_functions_take_more_arguments() -> None:
    assert keeps("not_null(metadata.a, metadata.b, output)", event())


@given(st.text(max_size=40))
def test_any_text_compiles_or_is_refused_in_one_line(expression: str) -> None:
    refusal = None
    try:
        compiled = compile_filter(expression)
    except ValueError as refused:
        refusal = str(refused)
    else:
        compiled.keeps(filter_view(event(metadata={"a": [1, "x"]}), None))  # never raises
    if refusal is not None:
        assert refusal.startswith("TRACE_FILTER: ")
        assert "\n" not in refusal


# A filter failing on one trace.

def test_an_expression_failing_on_one_trace_leaves_it_out_and_logs_once() -> None:
    trace_filter = compile_filter("length(metadata.tags) > `1`")
    tags: list[Any] = [{"token": "sk-secret-value", "more": 1}, 12, 12]
    broken = [event(trace_id=f"bad-{n}", metadata={"tags": tag}) for n, tag in enumerate(tags)]
    good = event(trace_id="good", metadata={"tags": ["a", "b"]})
    with capture_logs() as logs:
        decisions = [trace_filter.keeps(filter_view(t, None)) for t in [*broken, good]]
    assert decisions == [True, False, False, True]  # an object has a length; 12 has none
    assert trace_filter.errors == 2
    [logged] = logs
    assert logged["event"] == "trace_filter_failed"
    assert logged["trace_id"] == "bad-1"
    assert logged["problem"] == "length() got number, expected one of string, array, object"
    assert "12" not in str(logged)
    assert "sk-secret" not in str(logged)


def test_the_failure_logged_never_holds_the_traces_values() -> None:
    trace_filter = compile_filter("starts_with(metadata.token, 'x')")
    with capture_logs() as logs:
        kept = trace_filter.keeps(filter_view(event(metadata={"token": {"k": "sk-live-9"}}),
                                              None))
    assert kept is False
    assert "sk-live-9" not in str(logs)
    assert logs[0]["problem"] == "starts_with() got object, expected one of string"


def test_a_trace_too_deep_to_view_is_left_out_and_counted_not_raised() -> None:
    nested: dict[str, object] = {}
    inner = nested
    for _ in range(400):  # deeper than serialising the view allows
        inner["x"] = {}
        inner = inner["x"]  # type: ignore[assignment]
    trace = event(metadata=nested)
    trace_filter = compile_filter("project_id == null")
    assert not trace_filter.keeps_trace(trace, None)
    assert trace_filter.errors == 1
    assert trace_filter.keeps_trace(event(), None), "the next trace is judged as usual"
