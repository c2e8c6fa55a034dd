"""(trace, judge result) -> ``VerdictEvent``, with a deterministic id.

What the judge wrote (its reason and claims, an error's message) can quote anything the
endpoint saw, the request's credentials included: known secrets are redacted from it, as in
the logs, and an error message is cut (the judge's answer is bounded by ``JudgeAnswer``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from consumer.errors import JudgeError
from consumer.prompt import PROMPT_VERSION, normalise_score
from consumer.redaction import redact
from schemas.judge import JudgeAnswer, cut
from schemas.trace import TraceEvent
from schemas.verdict import Source, Truncation, Usage, VerdictError, VerdictEvent

# A fixed namespace: the same trace under the same prompt version always maps to one id.
VERDICT_NAMESPACE = uuid.UUID("6f1c4c1e-8d1b-4b52-9a57-0c2a7e3f9b10")
MAX_ERROR_MESSAGE_CHARS = 1_000


def verdict_id(trace_id: str, prompt_version: str = PROMPT_VERSION) -> str:
    """The verdict's id and Kafka key: a UUIDv5 of the rule, prompt version and trace id."""
    return str(uuid.uuid5(VERDICT_NAMESPACE, f"groundedness\x1f{prompt_version}\x1f{trace_id}"))


@dataclass(frozen=True, slots=True)
class Context:
    """What every verdict of one evaluation shares."""

    judge_model: str
    threshold: float
    truncation: Truncation
    source: Source | None
    secrets: tuple[str, ...] = ()  # known_secrets(...): redacted from what the judge wrote


def judged(
    trace: TraceEvent, answer: JudgeAnswer, usage: Usage | None, latency_ms: int, ctx: Context
) -> VerdictEvent:
    """A pass or fail verdict: pass when the score is at or above the threshold."""
    score = normalise_score(answer.score)
    return VerdictEvent(
        verdict_id=verdict_id(trace.trace_id),
        trace_id=trace.trace_id,
        prompt_version=PROMPT_VERSION,
        judge_model=ctx.judge_model,
        verdict="pass" if score >= ctx.threshold else "fail",
        score=score,
        raw_score=answer.score,
        threshold=ctx.threshold,
        reason=redact(answer.reason, ctx.secrets),
        unsupported_claims=[redact(claim, ctx.secrets) for claim in answer.unsupported_claims],
        error=None,
        truncation=ctx.truncation,
        usage=usage,
        latency_ms=latency_ms,
        evaluated_at=_now(),
        source=ctx.source,
    )


def errored(
    trace: TraceEvent, error: JudgeError, usage: Usage | None, latency_ms: int, ctx: Context
) -> VerdictEvent:
    """An error verdict: the check could not decide; no score, never a pass."""
    return VerdictEvent(
        verdict_id=verdict_id(trace.trace_id),
        trace_id=trace.trace_id,
        prompt_version=PROMPT_VERSION,
        judge_model=ctx.judge_model,
        verdict="error",
        score=None,
        raw_score=None,
        threshold=ctx.threshold,
        reason=None,
        unsupported_claims=[],
        error=VerdictError(
            type=error.kind,
            message=cut(redact(error.message, ctx.secrets), MAX_ERROR_MESSAGE_CHARS),
        ),
        truncation=ctx.truncation,
        usage=usage,
        latency_ms=latency_ms,
        evaluated_at=_now(),
        source=ctx.source,
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
