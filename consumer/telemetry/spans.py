"""The span as the telemetry subsystem sees it, whatever the wire format (pure).

OTLP decoding (``consumer.inputs.otlp``) produces these, one ``DecodedRecord`` per record;
convention mapping (``conventions.py``) reads them.
Ids are lowercase hex, as OTLP JSON and every tracing UI write them; attribute values are the
plain Python values of OTLP's ``AnyValue`` (arrays as tuples, key-value lists as dicts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

AttributeValue = Any  # str | bool | int | float | bytes | tuple[value, ...] | dict[str, value]
Attributes = Mapping[str, AttributeValue]


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """A timestamped event on a span (``gen_ai.choice``, ``gen_ai.user.message``, ...)."""

    name: str
    time_unix_nano: int
    attributes: Attributes = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Span:
    """One span with the attributes of its resource; ``parent_span_id`` None at a root."""

    trace_id: str  # 32 lowercase hex digits
    span_id: str  # 16 lowercase hex digits
    parent_span_id: str | None
    name: str
    start_unix_nano: int
    end_unix_nano: int
    attributes: Attributes = field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()
    resource: Attributes = field(default_factory=dict)
    error: str | None = None  # why the span failed (status ERROR); None when it did not

    @property
    def is_root(self) -> bool:
        """True for the trace's root span (no parent)."""
        return self.parent_span_id is None


@dataclass(frozen=True, slots=True)
class LogEvent:
    """A GenAI log record (``gen_ai.user.message``, ``gen_ai.choice``,
    ``gen_ai.client.inference.operation.details``...): an event of its span, which assembly
    joins to it (``log_events.py``), so that it is read as the span's own.

    ``event.attributes`` are the record's attributes; its body, when it has one, is under
    ``gen_ai.event.content`` (a key-value list as a dict, any other value as
    ``{"content": value}``), where the span events of the same conventions keep theirs."""

    trace_id: str  # 32 lowercase hex digits
    span_id: str | None  # 16 lowercase hex digits; None when the record names no span
    event: SpanEvent


@dataclass(slots=True)
class DecodedRecord:
    """What one record carried: the kept GenAI spans (or GenAI log records), and counts of
    the rest."""

    kept: list[Span] = field(default_factory=list)
    logs: list[LogEvent] = field(default_factory=list)  # a logs topic's GenAI records
    logs_dropped: int = 0  # a logs topic's other records: no GenAI event, or no trace id
    dropped: int = 0  # spans not kept: no GenAI content, or unreadable (counted in both)
    invalid: int = 0  # spans unreadable: no valid trace or span id, or a field that won't parse
    roots_seen: set[str] = field(default_factory=set)  # traces whose root span is in this record
    # every valid span (or log record), kept or not
    spans_per_trace: dict[str, int] = field(default_factory=dict)
    cut_values: int = 0  # attribute values cut to the bounds in ``consumer.inputs.otlp.values``
    problem: str | None = None  # why the first unreadable span (or resource part) was left out
