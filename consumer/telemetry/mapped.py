"""What convention mapping makes of one trace: the answer, its context and its tools (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from schemas.trace import Document, TraceEvent

ContextSource = Literal["retrieval", "llm_input"]


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message of an LLM call: its role (lowercase) and its text."""

    role: str
    content: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool the application called (a tool span) or the model asked for (an output message)."""

    name: str
    arguments: str | None = None
    result: str | None = None
    call_id: str | None = None  # pairs a model's request with the tool span that ran it
    span_id: str | None = None


@dataclass(frozen=True, slots=True)
class MappedTrace:
    """One candidate trace, read for the judge and the rules.

    ``answer`` is ``""`` when the trace is a candidate (it holds an LLM call) but no answer was
    found: the pipeline skips it, as it skips a trace event without output.
    """

    trace_id: str
    answer: str
    answer_span_id: str | None
    input: str | None
    documents: tuple[Document, ...]
    context_source: ContextSource
    tool_calls: tuple[ToolCall, ...] = ()
    tools_available: tuple[str, ...] = ()
    agent: bool = False  # an AGENT / invoke_agent span: the model worked with tools
    project_id: str | None = None
    session_id: str | None = None
    start_unix_nano: int = 0

    @property
    def has_answer(self) -> bool:
        """False when the answer is empty or whitespace only (the trace is skipped)."""
        return bool(self.answer.strip())

    def to_trace_event(self) -> TraceEvent:
        """The trace as the existing judge pipeline takes it."""
        return TraceEvent.model_validate({
            "trace_id": self.trace_id,
            "output": self.answer,
            "input": self.input,
            "retrieved_documents": list(self.documents),
            "project_id": self.project_id,
            # Epoch nanoseconds: TraceEvent reads them as an ISO instant.
            "timestamp": self.start_unix_nano or None,
        })
