"""The trace event an LLM application publishes on ``TRACES_TOPIC``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

SCHEMA_VERSION = 1


class Document(BaseModel):
    """One retrieved document; a plain JSON string is accepted in its place."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    content: str
    id: str | None = None
    metadata: dict[str, Any] | None = None


class TraceEvent(BaseModel):
    """One answer of an LLM application, with the documents retrieved for it."""

    model_config = ConfigDict(extra="ignore", frozen=True, title="TraceEvent")

    trace_id: str = Field(min_length=1, description="Non-empty id of the trace.")
    output: str | None = Field(default=None, description="The answer to judge.")
    input: str | None = Field(default=None, description="The user's request or task.")
    retrieved_documents: list[Document] | None = None
    expected_output: str | None = None
    project_id: str | None = None
    timestamp: str | None = None
    metadata: dict[str, Any] | None = None
    schema_version: int | None = None

    @field_validator("retrieved_documents", mode="before")
    @classmethod
    def _strings_are_documents(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"content": item} if isinstance(item, str) else item for item in value]
        return value

    @field_validator("trace_id")
    @classmethod
    def _trace_id_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("trace_id is blank")
        return value

    @property
    def has_output(self) -> bool:
        """False when the output is missing, null, empty or whitespace only."""
        return bool(self.output and self.output.strip())
