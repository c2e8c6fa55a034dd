"""The JSON answer the judge must return (asked for with structured output).

The score is read strictly: a JSON integer 1-5, or the same written as a whole number (``4.0``,
as some serialisers do) or as a string of ASCII digits (``"4"``, as text-mode judges sometimes
quote it). A boolean (``true`` would otherwise read as 1, a confident fail), a fraction, any
other string and anything out of range make the answer unparseable.

The texts are bounded: an endpoint that ignores ``max_tokens`` cannot make a verdict too large
to publish. A reason or claim over its bound is cut (ending in "…"), claims past the count
are dropped; the score still stands.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

MIN_RAW_SCORE = 1
MAX_RAW_SCORE = 5
# Far above what MAX_ANSWER_TOKENS (400) lets a judge write; at six bytes of JSON per
# character (the worst escape) the bounded answer stays under 330 kB.
MAX_REASON_CHARS = 2_000
MAX_CLAIMS = 50
MAX_CLAIM_CHARS = 1_000
SCORE_PROBLEM = f"score must be an integer {MIN_RAW_SCORE}-{MAX_RAW_SCORE}"


class JudgeAnswer(BaseModel):
    """The judge's verdict on one answer: a 1-5 score, a reason and the unsupported claims."""

    model_config = ConfigDict(extra="ignore", title="JudgeAnswer")

    score: int = Field(ge=MIN_RAW_SCORE, le=MAX_RAW_SCORE, strict=True)
    reason: str
    unsupported_claims: list[str] = Field(default_factory=list)

    @field_validator("score", mode="before")
    @classmethod
    def _whole_number(cls, value: Any) -> Any:
        return whole_score(value)

    @field_validator("reason")
    @classmethod
    def _bounded_reason(cls, value: str) -> str:
        return cut(value, MAX_REASON_CHARS)

    @field_validator("unsupported_claims")
    @classmethod
    def _bounded_claims(cls, value: list[str]) -> list[str]:
        return [cut(claim, MAX_CLAIM_CHARS) for claim in value[:MAX_CLAIMS]]


def whole_score(value: Any) -> Any:
    """The score as an int, or a ValueError naming what it is instead; range is checked
    after (values of other types pass through for the strict int check to refuse)."""
    if isinstance(value, bool):
        raise ValueError(f"{SCORE_PROBLEM}, got a boolean")
    if isinstance(value, float):
        if not (math.isfinite(value) and value.is_integer()):
            raise ValueError(f"{SCORE_PROBLEM}, got {value!r}")
        return int(value)
    if isinstance(value, str):
        if not (value.isascii() and value.isdigit()):
            raise ValueError(f"{SCORE_PROBLEM}, got the string {value[:20]!r}")
        return int(value)
    return value


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the last one an ellipsis when anything was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
