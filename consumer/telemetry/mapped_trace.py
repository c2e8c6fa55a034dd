"""What convention mapping makes of one trace: the answer, its context and its tools (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from schemas.trace import Document, TraceEvent

ContextSource = Literal["retrieval", "llm_input"]
UNNAMED_TOOL = "(unnamed tool)"


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
    error: str | None = None  # the tool span failed (status ERROR): why


@dataclass(frozen=True, slots=True)
class MappedTrace:
    """One candidate trace, read for the judge and the rules.

    ``answer`` is ``""`` when the trace is a candidate (it holds an LLM call) but no answer was
    found: the pipeline skips it, as it skips a trace event without output. ``answer_found``
    tells the two kinds apart: True when a span (or a log record joined to it) recorded an
    answer that is blank or holds no text, False when none recorded one at all (content
    capture off, or content where no convention puts it).
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
    answer_found: bool = True

    @property
    def has_answer(self) -> bool:
        """False when the answer is empty or whitespace only (the trace is skipped)."""
        return bool(self.answer.strip())

    def to_trace_event(self) -> TraceEvent:
        """The trace as the judge and the rules take it; the tool fields only when the trace
        has tools, so a trace without any reads as a ``trace_json`` event without them."""
        available = [name for name in self.tools_available if name.strip()]
        return TraceEvent.model_validate({
            "trace_id": self.trace_id,
            "output": self.answer,
            "input": self.input,
            "retrieved_documents": list(self.documents),
            "project_id": self.project_id,
            # Epoch nanoseconds: TraceEvent reads them as an ISO instant.
            "timestamp": self.start_unix_nano or None,
            "tools_available": available or None,
            "tool_calls": [
                # A tool span with neither a tool name nor a span name still ran: it keeps a
                # name, since the event refuses a blank one.
                {"name": call.name if call.name.strip() else UNNAMED_TOOL,
                 "arguments": call.arguments, "result": call.result, "error": call.error}
                for call in self.tool_calls
            ] or None,
            "agent": self.agent or None,
        })
