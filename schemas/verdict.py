"""The verdict event published on ``VERDICTS_TOPIC``, keyed by ``verdict_id``.

The fields from span input (``span_id`` … ``assembly``) and of the cost controls (``cached``,
``cost_usd``) are left out of the JSON when unset, so a verdict on a ``trace_json`` event is
byte for byte what it was before they existed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1
# The rules of ``RULES`` (DESIGN.md "Rules"); consumer/rules/registry.py knows each by this name.
RuleName = Literal["groundedness", "missing_citation", "answered_without_tool"]
RULE: RuleName = "groundedness"

Outcome = Literal["pass", "fail", "error"]
ContextSource = Literal["retrieval", "llm_input"]
ClosedBy = Literal["quiet", "max_wait", "capacity"]


def _no_tokens(value: int) -> bool:
    return value == 0


def _unset(value: object) -> bool:
    return value is None


def _not_cached(value: object) -> bool:
    return value is False


class VerdictError(BaseModel):
    """Why the check could not decide for this trace."""

    model_config = ConfigDict(frozen=True)

    type: str
    message: str


class Truncation(BaseModel):
    """What was cut from the trace before it reached the judge."""

    model_config = ConfigDict(frozen=True)

    documents_received: int = 0
    documents_dropped: int = 0
    documents_cut: list[int] = Field(
        default_factory=list, description="Indexes (0-based) of documents cut to the limit."
    )
    document_chars_cut: int = 0
    output_chars_cut: int = 0
    input_chars_cut: int = 0

    @property
    def any(self) -> bool:
        """True when anything was cut."""
        return bool(
            self.documents_dropped or self.documents_cut or self.output_chars_cut
            or self.input_chars_cut
        )


class Usage(BaseModel):
    """Tokens the judge spent on this verdict, summed over attempts."""

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = Field(
        default=0, exclude_if=_no_tokens,
        description="Of the prompt tokens, those the provider's prompt cache served "
                    "(usage.prompt_tokens_details.cached_tokens), priced at "
                    "JUDGE_PRICE_CACHED_INPUT_PER_MILLION; left out when none.",
    )


class Source(BaseModel):
    """Where the trace was read from."""

    model_config = ConfigDict(frozen=True)

    topic: str
    partition: int
    offset: int


class Assembly(BaseModel):
    """How a trace assembled from spans was put together and closed."""

    model_config = ConfigDict(frozen=True)

    spans: int = Field(description="GenAI spans kept for the trace.")
    root_seen: bool = Field(description="Whether the trace's root span arrived.")
    closed_by: ClosedBy = Field(
        description="quiet: the root arrived and no span for TRACE_QUIET_SECONDS; "
        "max_wait: TRACE_MAX_WAIT_SECONDS after the first span; capacity: MAX_OPEN_TRACES "
        "reached, the oldest open trace closed with what it had."
    )
    capped: int = Field(
        default=0,
        description="GenAI spans of the trace not kept: over its bounds (1,000 spans, about "
        "8 MiB), the first and the latest being kept.",
    )


class VerdictEvent(BaseModel):
    """The outcome of one rule (groundedness, or a deterministic rule) for one trace."""

    model_config = ConfigDict(frozen=True, title="VerdictEvent")

    schema_version: int = SCHEMA_VERSION
    verdict_id: str
    trace_id: str
    rule: RuleName = RULE
    prompt_version: str = Field(
        description="The rule and its version (groundedness@v1: the judge's prompt)."
    )
    judge_model: str | None = Field(description="Null for a rule without a model.")
    verdict: Outcome
    score: float | None = Field(
        description="(raw_score - 1) / 4; 1 or 0 for a rule without a model; null for error."
    )
    raw_score: int | None
    threshold: float | None = Field(description="Null for a rule without a model.")
    reason: str | None
    unsupported_claims: list[str]
    error: VerdictError | None
    truncation: Truncation
    usage: Usage | None
    latency_ms: int
    evaluated_at: str
    source: Source | None
    # From span input (TRACES_FORMAT otlp_*), the rest below only from it; span_id also from a
    # trace_json event that gives one (for VERDICT_EVENTS). Omitted from the JSON when unset.
    span_id: str | None = Field(
        default=None, exclude_if=_unset, description="The answer's span: 16 hex characters."
    )
    project_id: str | None = Field(
        default=None, exclude_if=_unset,
        description="Resource openinference.project.name, else service.name.",
    )
    session_id: str | None = Field(
        default=None, exclude_if=_unset, description="session.id or gen_ai.conversation.id."
    )
    context_source: ContextSource | None = Field(
        default=None, exclude_if=_unset,
        description="retrieval: retrieved documents; llm_input: the answer's LLM call input.",
    )
    assembly: Assembly | None = Field(default=None, exclude_if=_unset)
    # Cost controls; omitted from the JSON when unset, as the span fields are.
    cached: bool = Field(
        default=False, exclude_if=_not_cached,
        description="The judge's answer to an identical request was reused: no tokens spent.",
    )
    cost_usd: float | None = Field(
        default=None, exclude_if=_unset,
        description="USD for the judge's tokens at JUDGE_PRICE_*_PER_MILLION (0 when cached).",
    )
