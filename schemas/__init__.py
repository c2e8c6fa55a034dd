"""Wire formats of groundedness-worker: pydantic models and their JSON Schemas."""

from schemas.judge import JudgeAnswer
from schemas.trace import Document, TraceEvent
from schemas.verdict import Assembly, Source, Truncation, Usage, VerdictError, VerdictEvent

__all__ = [
    "Assembly",
    "Document",
    "JudgeAnswer",
    "Source",
    "TraceEvent",
    "Truncation",
    "Usage",
    "VerdictError",
    "VerdictEvent",
]
