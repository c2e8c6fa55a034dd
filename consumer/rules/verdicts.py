"""(trace, judge result) -> ``VerdictEvent``, with a deterministic id: an answer becomes a
pass or fail verdict, a trace's failure an ``error`` verdict; (trace, a deterministic rule's
finding) -> a pass or fail verdict with score 1 or 0 and no model (``checked``).

What the judge wrote (its reason and claims, an error's message) can quote anything the
endpoint saw, the request's credentials included: known secrets are redacted from it, as in
the logs. Then it is bounded (an endpoint that ignores ``max_tokens`` cannot make a verdict
too large to publish): a text over its bound is cut, ending in "…", and claims past the count
are dropped. Redaction comes first: a cut inside a secret would leave a head of it that no
longer ends the text.

``judge_model`` names the model that answered, as the response named it (``gpt-4o-mini``
answers as ``gpt-4o-mini-2024-07-18``; the local judge as itself), else the one asked for
(``JUDGE_MODEL``: an error before any response). The endpoint writes it, so it is redacted and
bounded as the judge's text is. It is in no id: the verdict id is the rule's, its version's
and the trace's, so a model that answers under a new name (a new snapshot behind the same
alias) overwrites the trace's verdict rather than adding one.

A trace assembled from spans carries its ``TraceOrigin`` (the answer's span, project, session,
how it assembled); a ``trace_json`` event has none and its verdict has none of those fields.
Its ids are the application's attributes, so they are redacted and bounded the same way.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from consumer.cost.pricing import Prices
from consumer.judge.prompt import PROMPT_VERSION, normalise_score
from consumer.judge.result import Answered, JudgeResult, TraceFailed
from consumer.redaction import redact
from consumer.telemetry.origin import TraceOrigin
from schemas.trace import TraceEvent, is_otel_trace_id
from schemas.verdict import (
    RULE,
    Assembly,
    RuleName,
    Source,
    Truncation,
    Usage,
    VerdictError,
    VerdictEvent,
)

# A fixed namespace: the same trace under the same rule and version always maps to one id.
VERDICT_NAMESPACE = uuid.UUID("6f1c4c1e-8d1b-4b52-9a57-0c2a7e3f9b10")
# Far above what MAX_ANSWER_TOKENS (400) lets a judge write; at six bytes of JSON per
# character (the worst escape) the bounded texts stay under 330 kB.
MAX_VERDICT_REASON_CHARS = 2_000
MAX_CLAIMS = 50
MAX_CLAIM_CHARS = 1_000
MAX_ERROR_MESSAGE_CHARS = 1_000
MAX_JUDGE_MODEL_CHARS = 256  # model ids are short; an endpoint's name must not swell a verdict
# Project and session come from span attributes, which any application writes: bounded as
# the trace id is (schemas.trace.MAX_TRACE_ID_CHARS), so they cannot swell a verdict.
MAX_ORIGIN_ID_CHARS = 1_024


def verdict_id(trace_id: str, prompt_version: str = PROMPT_VERSION, rule: str = RULE) -> str:
    """The verdict's id and Kafka key: a UUIDv5 of the rule, its version and the trace id.

    Groundedness verdicts keep the ids they had before other rules existed (a verdict on a
    compacted topic keeps its key); each rule's differ from every other's for one trace. The
    judge model is not in it: the asked one or the one that answered, the key stays.
    """
    return str(uuid.uuid5(VERDICT_NAMESPACE, f"{rule}\x1f{prompt_version}\x1f{trace_id}"))


@dataclass(frozen=True, slots=True)
class Context:
    """What every verdict of one evaluation shares."""

    judge_model: str | None  # asked for (JUDGE_MODEL); None: a rule without a model
    threshold: float | None
    truncation: Truncation
    source: Source | None
    secrets: tuple[str, ...] = ()  # known_secrets(...): redacted from what the judge wrote
    origin: TraceOrigin | None = None  # None for a trace_json event
    rule: RuleName = RULE
    prompt_version: str = PROMPT_VERSION  # the rule's name@version
    cached: bool = False  # the judge's answer to an identical request, reused
    prices: Prices | None = None  # JUDGE_PRICE_*: the verdict then carries its cost


def origin_fields(origin: TraceOrigin | None, secrets: Sequence[str] = (),
                  trace: TraceEvent | None = None) -> dict[str, Any]:
    """The verdict fields a trace from spans adds; for a ``trace_json`` event only the
    ``span_id`` it gives (16 hex, checked by the schema) beside an OTel trace id, if any."""
    if origin is None:
        # A span id beside any other trace id names no OTel span.
        if trace is not None and trace.span_id and is_otel_trace_id(trace.trace_id):
            return {"span_id": trace.span_id}
        return {}
    # The ids are the application's span attributes: a secret it put there (a session keyed by
    # a token) is redacted, as from the judge's text, and before the cut for the same reason.
    return {
        "span_id": _bounded(origin.span_id, secrets),
        "project_id": _bounded(origin.project_id, secrets),
        "session_id": _bounded(origin.session_id, secrets),
        # Plain strings here, checked against the contract's literals by the models.
        "context_source": origin.context_source,
        "assembly": Assembly(spans=origin.spans, root_seen=origin.root_seen,
                             closed_by=origin.closed_by, capped=origin.capped),
    }


def verdict_for(trace: TraceEvent, result: JudgeResult, ctx: Context) -> VerdictEvent:
    """The verdict on a judge result: ``judged`` for an answer, ``errored`` for a failure."""
    match result:
        case Answered():
            return judged(trace, result, ctx)
        case TraceFailed():
            return errored(trace, result, ctx)


def judged(trace: TraceEvent, answered: Answered, ctx: Context) -> VerdictEvent:
    """A pass or fail verdict: pass when the score is at or above the threshold."""
    answer = answered.answer
    score = normalise_score(answer.score)
    assert ctx.threshold is not None  # noqa: S101 - a judged rule always has one
    return VerdictEvent(
        verdict_id=_id(trace, ctx),
        trace_id=trace.trace_id,
        rule=ctx.rule,
        prompt_version=ctx.prompt_version,
        judge_model=_judge_model(answered.model, ctx),
        verdict="pass" if score >= ctx.threshold else "fail",
        score=score,
        raw_score=answer.score,
        threshold=ctx.threshold,
        reason=cut(redact(answer.reason, ctx.secrets), MAX_VERDICT_REASON_CHARS),
        unsupported_claims=[cut(redact(claim, ctx.secrets), MAX_CLAIM_CHARS)
                            for claim in answer.unsupported_claims[:MAX_CLAIMS]],
        error=None,
        truncation=ctx.truncation,
        usage=answered.usage,
        latency_ms=answered.latency_ms,
        evaluated_at=_now(),
        source=ctx.source,
        **origin_fields(ctx.origin, ctx.secrets, trace),
        **_cost_fields(answered.usage, ctx),
    )


def errored(trace: TraceEvent, failed: TraceFailed, ctx: Context) -> VerdictEvent:
    """An error verdict: the check could not decide; no score, never a pass."""
    return VerdictEvent(
        verdict_id=_id(trace, ctx),
        trace_id=trace.trace_id,
        rule=ctx.rule,
        prompt_version=ctx.prompt_version,
        judge_model=_judge_model(failed.model, ctx),
        verdict="error",
        score=None,
        raw_score=None,
        threshold=ctx.threshold,
        reason=None,
        unsupported_claims=[],
        error=VerdictError(
            type=failed.kind,
            message=cut(redact(failed.message, ctx.secrets), MAX_ERROR_MESSAGE_CHARS),
        ),
        truncation=ctx.truncation,
        usage=failed.usage,
        latency_ms=failed.latency_ms,
        evaluated_at=_now(),
        source=ctx.source,
        **origin_fields(ctx.origin, ctx.secrets, trace),
        **_cost_fields(failed.usage, ctx),
    )


def checked(trace: TraceEvent, passed: bool, reason: str, ctx: Context) -> VerdictEvent:
    """A deterministic rule's verdict: pass (score 1) or fail (score 0), and why; no model.

    Its reason quotes the answer (a marker) and the application's tool names and errors, so
    it is redacted and bounded as the judge's is.
    """
    return VerdictEvent(
        verdict_id=_id(trace, ctx),
        trace_id=trace.trace_id,
        rule=ctx.rule,
        prompt_version=ctx.prompt_version,
        judge_model=None,
        verdict="pass" if passed else "fail",
        score=1.0 if passed else 0.0,
        raw_score=None,
        threshold=None,
        reason=cut(redact(reason, ctx.secrets), MAX_VERDICT_REASON_CHARS),
        unsupported_claims=[],
        error=None,
        truncation=ctx.truncation,
        usage=None,
        latency_ms=0,
        evaluated_at=_now(),
        source=ctx.source,
        **origin_fields(ctx.origin, ctx.secrets, trace),
    )


def _judge_model(answered_as: str | None, ctx: Context) -> str | None:
    """The model that answered, as its response named it; else the one asked for."""
    if answered_as and answered_as.strip():
        return cut(redact(answered_as.strip(), ctx.secrets), MAX_JUDGE_MODEL_CHARS)
    return ctx.judge_model


def _cost_fields(usage: Usage | None, ctx: Context) -> dict[str, Any]:
    """``cached`` and ``cost_usd`` of a judged verdict (an error's tokens cost money too)."""
    cost = ctx.prices.cost_usd(usage) if ctx.prices is not None else None
    return {"cached": ctx.cached, "cost_usd": cost}


def _id(trace: TraceEvent, ctx: Context) -> str:
    return verdict_id(trace.trace_id, ctx.prompt_version, ctx.rule)


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the last one an ellipsis when anything was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _bounded(value: str | None, secrets: Sequence[str]) -> str | None:
    return None if value is None else cut(redact(value, secrets), MAX_ORIGIN_ID_CHARS)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
