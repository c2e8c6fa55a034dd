"""``TracePath`` on traces without an answer: a candidate whose answer was found nowhere is
counted ``skipped{reason="no_answer_found"}`` and warned about at most once a minute, naming
what its LLM calls carried; one whose answer is empty stays ``empty_output``, unwarned."""

from __future__ import annotations

import json
from typing import Any

import pytest
import structlog
from aiokafka import TopicPartition
from structlog.testing import capture_logs

from consumer.ops import metrics
from consumer.ops.metrics import REGISTRY
from consumer.pipeline.records import RecordPath
from consumer.pipeline.traces import NO_ANSWER_LOG_EVERY_S, TracePath
from consumer.rules.missing_citation import MissingCitation
from consumer.rules.rule_set import RuleSet
from consumer.telemetry.assembly import ClosedTrace
from consumer.telemetry.spans import Span, SpanEvent
from tests.support.pipeline_fakes import ListSink

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TP = TopicPartition("otlp_spans", 0)


def chat_span(n: int, **attributes: Any) -> Span:
    """openai-v2's chat span with content capture off: metadata, no messages."""
    return Span(TRACE_ID, f"{n:016x}", None, "chat gpt-4o-mini", 0, 10, {
        "gen_ai.operation.name": "chat", "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-4o-mini", "gen_ai.usage.input_tokens": 12, **attributes,
    }, events=(SpanEvent("gen_ai.choice", 9, {"gen_ai.event.content": {
        "index": 0, "finish_reason": "stop", "message": {"role": "assistant"}}}),))


def closed(*spans: Span) -> ClosedTrace:
    return ClosedTrace(trace_id=TRACE_ID, spans=spans, root_seen=True, closed_by="quiet",
                       span_count=len(spans), capped=0, first_offset=3)


def skipped(reason: str) -> float:
    labels = {"rule": "missing_citation", "reason": reason}
    return REGISTRY.get_sample_value("groundedness_skipped_total", labels) or 0.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def trace_path(clock: Clock) -> tuple[TracePath, RecordPath, ListSink]:
    sink = ListSink()
    rules = RuleSet([MissingCitation()])  # a skip evaluates nothing: any rule will do
    records = RecordPath(sink, rules)
    return TracePath(records, rules, clock=clock), records, sink


async def test_an_answer_found_nowhere_is_counted_and_named_once_a_minute() -> None:
    clock = Clock()
    path, records, sink = trace_path(clock)
    before = (skipped("no_answer_found"), skipped("empty_output"))
    with capture_logs() as logs:
        bound = structlog.get_logger().bind(trace_id=TRACE_ID)
        await path.handle(TP, closed(chat_span(1)), bound)
        clock.now += NO_ANSWER_LOG_EVERY_S - 1
        await path.handle(TP, closed(chat_span(2)), bound)  # counted, not warned
        clock.now += 1
        await path.handle(TP, closed(chat_span(3, **{"llm.prompts.0.prompt.template": "x"})),
                          bound)
    assert (skipped("no_answer_found"), skipped("empty_output")) == (
        before[0] + 3, before[1])
    assert (sink.verdicts, records.outcomes["skipped"]) == ([], 3)
    warnings = [entry for entry in logs if entry["event"] == "trace_answer_not_found"]
    assert [(w["log_level"], w["traces"]) for w in warnings] == [("warning", 1), ("warning", 2)]
    assert warnings[0]["attributes"] == [
        "gen_ai.operation.name", "gen_ai.request.model", "gen_ai.system",
        "gen_ai.usage.input_tokens"]
    assert warnings[0]["events"] == ["gen_ai.choice"]
    assert "llm.prompts.N.prompt.template" in warnings[1]["attributes"]
    assert "OTLP_LOGS_TOPIC" in warnings[0]["hint"]


async def test_an_empty_answer_stays_empty_output_and_is_not_warned_about() -> None:
    path, records, _ = trace_path(Clock())
    before = (skipped("no_answer_found"), skipped("empty_output"))
    blank = chat_span(1, **{"gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "parts": [{"type": "text", "content": "  "}]}])})
    with capture_logs() as logs:
        await path.handle(TP, closed(blank), structlog.get_logger())
    assert (skipped("no_answer_found"), skipped("empty_output")) == (before[0], before[1] + 1)
    assert records.outcomes["skipped"] == 1
    assert not [entry for entry in logs if entry["event"] == "trace_answer_not_found"]


@pytest.mark.parametrize("reason", ["no_answer_found", "empty_output", "filtered",
                                    "sampled_out"])
def test_every_skip_reason_of_a_configured_rule_starts_at_zero(reason: str) -> None:
    labels = {"rule": f"a_rule_to_start_{reason}", "reason": reason}  # new to this process
    assert REGISTRY.get_sample_value("groundedness_skipped_total", labels) is None
    metrics.expect_rules([labels["rule"]])
    assert REGISTRY.get_sample_value("groundedness_skipped_total", labels) == 0
