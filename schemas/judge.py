"""The JSON answer the judge must return (asked for with structured output).

The score is read strictly: a JSON integer 1-5, or the same written as a whole number (``4.0``,
as some serialisers do) or as a string of ASCII digits (``"4"``, as text-mode judges sometimes
quote it). A boolean (``true`` would otherwise read as 1, a confident fail), a fraction, any
other string and anything out of range make the answer unparseable.

The texts are kept as the judge wrote them: the verdict bounds them (``consumer.rules.verdicts``),
after redacting known secrets from them, so that a bound never cuts a secret in two.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

MIN_RAW_SCORE = 1
MAX_RAW_SCORE = 5
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
