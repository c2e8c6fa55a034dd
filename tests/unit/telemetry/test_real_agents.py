"""LlamaIndex ``FunctionAgent`` runs under OpenInference's instrumentor, and the repr test that
keeps their root span's ``StopEvent(result=AgentOutput(...))`` from being judged as the answer.

The agent is a workflow: its root span's ``output.value`` is the run's result as a Python repr,
its ``input.value`` a JSON dump of the workflow's state. What the user asked and was told are in
the LLM calls: the first call's user message, the last call's assistant reply.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
from openinference.semconv.trace import OpenInferenceMimeTypeValues, SpanAttributes
from opentelemetry.sdk.trace import ReadableSpan

from consumer.inputs import OtlpEncoding
from consumer.inputs.otlp.decode import decode_otlp
from consumer.rules.answered_without_tool import AnsweredWithoutTool
from consumer.telemetry.attributes import is_object_repr
from consumer.telemetry.conventions import map_trace
from consumer.telemetry.mapped_trace import MappedTrace
from tests.support import instrumented_app as app
from tests.support.otel_spans import otlp_json
from tests.unit.telemetry.span_builder import CHAIN, KIND, LLM, messages, sid, span

# openinference-instrumentation-llama-index 4.6 records LLM metadata with pydantic v1's
# ``.json()`` (its _handler.py), which pydantic 2 flags: their deprecation, not ours.
pytestmark = pytest.mark.filterwarnings(
    "ignore:The `json` method is deprecated:pydantic.warnings.PydanticDeprecatedSince20")

ENCODINGS: tuple[OtlpEncoding, ...] = ("otlp_proto", "otlp_json")
REFUND_QUESTION = "What is your refund policy?"  # no plan: answered without a tool
ROOT = "FunctionAgent.run"
TEXT = OpenInferenceMimeTypeValues.TEXT.value  # as the instrumentor labels a workflow's result


@dataclass(frozen=True)
class AgentRun:
    """One question to the agent: its reply, and the spans it emitted."""

    reply: str
    spans: list[ReadableSpan]


@dataclass(frozen=True)
class AgentRuns:
    """The agent's runs, made once for the module (a run costs ~0.2 s)."""

    tool_called: AgentRun
    tool_called_unstreamed: AgentRun
    no_tool_call: AgentRun
    tool_failed: AgentRun


@pytest.fixture(scope="module")
def agent_runs() -> Iterator[AgentRuns]:
    """A support agent offered tools, asked questions that need one, none, and a failing one."""
    tracer_provider, exporter = app.provider()
    fake = app.FakeModel(app.AGENT_PLANS)
    shop_tools = [app.lookup_order, app.search_kb]

    def run(question: str, tools: list[app.Tool], *, streaming: bool = True) -> AgentRun:
        reply = app.run_agent(fake.server.url, question, tools, streaming=streaming)
        spans = list(exporter.get_finished_spans())
        exporter.clear()
        return AgentRun(reply, spans)

    with fake.server, app.instrumented(LlamaIndexInstrumentor(), tracer_provider):
        runs = AgentRuns(
            tool_called=run(app.ORDER_QUESTION, shop_tools),
            tool_called_unstreamed=run(app.ORDER_QUESTION, shop_tools, streaming=False),
            no_tool_call=run(REFUND_QUESTION, shop_tools),
            tool_failed=run(app.WEATHER_QUESTION, [app.get_weather]),
        )
    yield runs
    tracer_provider.shutdown()


def mapped(run: AgentRun, encoding: OtlpEncoding) -> MappedTrace:
    """The run's one trace, as the collector's exporter writes it, decoded and mapped."""
    [record] = app.records(run.spans).values()
    decoded = decode_otlp(record if encoding == "otlp_proto" else otlp_json(record), encoding)
    trace = map_trace(decoded.kept)
    assert trace is not None
    return trace


def last_llm_call(run: AgentRun) -> str:
    """The hex span id of the LLM call that ended last: the one that gave the final reply."""
    calls = [span for span in run.spans if span.name in ("OpenAI.astream_chat", "OpenAI.achat")]
    last = max(calls, key=lambda span: span.end_time or 0)
    assert last.context is not None
    return format(last.context.span_id, "016x")


def root_output(run: AgentRun) -> str:
    [root] = [span for span in run.spans if span.name == ROOT]
    return str((root.attributes or {}).get(SpanAttributes.OUTPUT_VALUE))


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "unstreamed"])
def test_an_agent_that_called_a_tool_is_judged_on_its_final_reply(
    agent_runs: AgentRuns, encoding: OtlpEncoding, streaming: bool
) -> None:
    run = agent_runs.tool_called if streaming else agent_runs.tool_called_unstreamed
    trace = mapped(run, encoding)
    # The root's output.value is the workflow's result as a repr, never the reply itself.
    assert root_output(run).startswith("StopEvent(result=AgentOutput(")
    assert run.reply == app.ORDER_REPLY
    assert trace.answer == app.ORDER_REPLY
    assert trace.answer_span_id == last_llm_call(run)
    assert trace.input == app.ORDER_QUESTION
    assert trace.context_source == "llm_input"
    [call] = trace.tool_calls
    assert (call.name, call.error) == ("lookup_order", None)
    assert call.result is not None
    assert app.ORDER_RESULT in call.result
    assert trace.tools_available == ("lookup_order", "search_kb")
    assert AnsweredWithoutTool().check(trace.to_trace_event(), None).passed


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_an_agent_that_answered_without_a_tool_is_judged_on_its_reply(
    agent_runs: AgentRuns, encoding: OtlpEncoding
) -> None:
    run = agent_runs.no_tool_call
    trace = mapped(run, encoding)
    assert root_output(run).startswith("StopEvent(")
    assert (trace.answer, trace.input) == (app.REPLY, REFUND_QUESTION)
    assert trace.answer_span_id == last_llm_call(run)
    assert not trace.tool_calls
    assert trace.tools_available == ("lookup_order", "search_kb")
    outcome = AnsweredWithoutTool().check(trace.to_trace_event(), None)
    assert not outcome.passed
    assert "lookup_order" in outcome.reason


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_an_agent_whose_tool_raised_has_a_failed_call_and_its_reply(
    agent_runs: AgentRuns, encoding: OtlpEncoding
) -> None:
    run = agent_runs.tool_failed
    trace = mapped(run, encoding)
    # FunctionAgent catches the tool's exception and hands it to the model, which answers.
    assert run.reply == app.WEATHER_REPLY
    assert (trace.answer, trace.input) == (app.WEATHER_REPLY, app.WEATHER_QUESTION)
    assert trace.answer_span_id == last_llm_call(run)
    [call] = trace.tool_calls
    assert call.name == "get_weather"
    assert call.error == f"TimeoutError: {app.WEATHER_FAILURE}"
    assert trace.tools_available == ("get_weather",)
    outcome = AnsweredWithoutTool().check(trace.to_trace_event(), None)
    assert outcome.passed
    assert "failed" in outcome.reason


REPRS = [
    # What LlamaIndex workflows record (event summaries, cut at 200 characters).
    "StopEvent(result=AgentOutput(response=ChatMessage(role=<MessageRole.ASSISTANT: "
    "'assistant'>, additional_kwargs={}, blocks=[TextBlock(block_type='text', text='Order "
    "88123 left the warehouse on 3 May...",
    "AgentInput(input=[ChatMessage(role=<MessageRole.USER: 'user'>, additional_kwargs={}, "
    "blocks=[TextBlock(block_type='text', text='Where is order 88123?')])], "
    "current_agent_name='Agent')",
    "ToolCallResult(tool_name='lookup_order', tool_kwargs={'order_id': '88123'})",
    # A pydantic model's or a dataclass's repr, whole.
    "Response(response='Paris.', source_nodes=[], metadata=None)",
    "  AgentOutput(response='x')  ",
    # Python's default repr, with and without an address.
    "<workflows.context.context.Context object at 0x7fefb1f97a10>",
    "<Generator object>",
]
TEXTS = [
    "Yes (see the policy) refunds are accepted within 30 days.",
    "Yes(see the policy).",
    "Paris (France) is the capital.",
    "Call print(x=1) to see it.",
    "print(sep='')",
    "Use Point(x=1, y=2) to make a point.",
    "Point(x=1, y=2)\nbuilds a point at (1, 2).",
    "Foo(x==1)",
    '{"answer": "Paris", "score": 1}',
    "[1, 2, 3]",
    "def f(x=1):\n    return x",
    "PostgreSQL (version=16) is installed.",
    "RFC(7231)",
    "Order 88123 left the warehouse on 3 May.",
    "The object at 0x10 is <not a repr>.",
    "<b>bold</b>",
]


@pytest.mark.parametrize("value", REPRS)
def test_an_objects_repr_is_not_text(value: str) -> None:
    assert is_object_repr(value)


@pytest.mark.parametrize("value", TEXTS)
def test_answers_with_parentheses_code_or_json_are_text(value: str) -> None:
    assert not is_object_repr(value)


@pytest.mark.parametrize(("value", "is_repr"),
                         [*((value, True) for value in REPRS),
                          *((value, False) for value in TEXTS)])
def test_the_outermost_value_answers_unless_it_is_a_repr(value: str, is_repr: bool) -> None:
    # A workflow root with plain-text values, and the LLM call under it.
    spans = [
        span(1, None, {KIND: CHAIN, SpanAttributes.OUTPUT_VALUE: value,
                       SpanAttributes.OUTPUT_MIME_TYPE: TEXT, SpanAttributes.INPUT_VALUE: value,
                       SpanAttributes.INPUT_MIME_TYPE: TEXT}, start=0, end=100),
        span(2, 1, {KIND: LLM, **messages(SpanAttributes.LLM_INPUT_MESSAGES, ("user", "Q?")),
                    **messages(SpanAttributes.LLM_OUTPUT_MESSAGES, ("assistant", "Reply."))},
             start=10, end=90),
    ]
    trace = map_trace(spans)
    assert trace is not None
    if is_repr:
        assert (trace.answer, trace.answer_span_id, trace.input) == ("Reply.", sid(2), "Q?")
    else:
        assert (trace.answer, trace.answer_span_id, trace.input) == (value, sid(1), value)
