"""The JSON answer the judge must return (asked for with structured output)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MIN_RAW_SCORE = 1
MAX_RAW_SCORE = 5


class JudgeAnswer(BaseModel):
    """The judge's verdict on one answer: a 1-5 score, a reason and the unsupported claims."""

    model_config = ConfigDict(extra="ignore", title="JudgeAnswer")

    score: int = Field(ge=MIN_RAW_SCORE, le=MAX_RAW_SCORE, strict=False)
    reason: str
    unsupported_claims: list[str] = Field(default_factory=list)
