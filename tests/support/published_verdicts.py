"""Verdicts as the worker publishes them (``VerdictEvent`` JSON), for the readers' tests."""

from __future__ import annotations

from typing import Any

from schemas.verdict import Outcome, RuleName, Truncation, Usage, VerdictError, VerdictEvent

SCORES = {"pass": 1.0, "fail": 0.25, "error": None}


def a_verdict(trace_id: str, rule: RuleName = "groundedness", outcome: Outcome = "pass",
              reason: str | None = "supported by [1]", **fields: Any) -> VerdictEvent:
    """One rule's verdict on ``trace_id``, as published (``fields`` replace any)."""
    error = VerdictError(type="judge_timeout", message="no answer in 30 s") \
        if outcome == "error" else None
    return VerdictEvent(**{
        "verdict_id": f"{trace_id}-{rule}", "trace_id": trace_id, "rule": rule,
        "prompt_version": f"{rule}@v1", "judge_model": "gpt-4o-mini", "verdict": outcome,
        "score": SCORES[outcome], "raw_score": None if outcome == "error" else 2,
        "threshold": 0.75, "reason": None if outcome == "error" else reason,
        "unsupported_claims": [], "error": error, "truncation": Truncation(),
        "usage": Usage(prompt_tokens=400, completion_tokens=20, total_tokens=420),
        "latency_ms": 812, "evaluated_at": "2024-05-01T12:00:03.250Z", "source": None,
        **fields,
    })


def published(verdict: VerdictEvent) -> bytes:
    """The record value the sink writes."""
    return verdict.model_dump_json().encode()
