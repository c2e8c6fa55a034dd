"""``RecordPath.publish``: what a published verdict adds to the judge's metrics."""

from __future__ import annotations

from typing import Any

import structlog

from consumer.judge.result import TraceFailed
from consumer.ops.metrics import REGISTRY
from consumer.pipeline.records import RecordPath
from consumer.rules.groundedness.evaluator import Evaluation
from schemas.verdict import Usage
from tests.support.pipeline_fakes import ListSink
from tests.support.transactional_fakes import a_verdict


def _judge_calls() -> float:
    return REGISTRY.get_sample_value("groundedness_judge_latency_seconds_count") or 0.0


def _prompt_tokens() -> float:
    return REGISTRY.get_sample_value("groundedness_judge_tokens_total", {"kind": "prompt"}) or 0.0


async def _publish(result: TraceFailed) -> ListSink:
    sink = ListSink()
    path = RecordPath(sink, rules=Any)  # type: ignore[arg-type]  # publish never evaluates
    await path.publish(Evaluation(a_verdict(None), result), structlog.get_logger())
    return sink


async def test_an_internal_errors_verdict_is_not_counted_as_a_judge_call() -> None:
    before = _judge_calls()
    sink = await _publish(TraceFailed(kind="internal_error", message="bug", usage=None,
                                      latency_ms=0, attempts=0))
    assert len(sink.verdicts) == 1
    assert _judge_calls() == before


async def test_a_failed_judge_call_is_counted_with_its_tokens() -> None:
    calls, tokens = _judge_calls(), _prompt_tokens()
    await _publish(TraceFailed(kind="timeout", message="slow", latency_ms=30_000, attempts=2,
                               usage=Usage(prompt_tokens=7, completion_tokens=0)))
    assert _judge_calls() == calls + 1
    assert _prompt_tokens() == tokens + 7
