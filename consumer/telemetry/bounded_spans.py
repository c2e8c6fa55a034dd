"""One open trace's GenAI spans, held within bounds on their count and memory (pure).

A trace can carry far more than a judge needs (an agent looping for hours, a retriever
returning megabytes), and assembly holds thousands of traces at once, so each keeps at most
``max_spans`` spans and about ``max_bytes`` of memory. Over a bound it keeps the first spans
and the latest ones, dropping from the middle: the retrievers and the first call come early,
the final answer and the root's output come last (a span is exported when it ends, and the
outermost ends last), and both ends are what the mapping reads. The ids of the spans let go
are remembered (up to ``MAX_LET_GO_IDS``), so that their children are not taken for the
trace's outermost spans. A span alone larger than its half of ``max_bytes`` has its largest
text values cut to fit rather than being lost (the judge cuts the context anyway).

A span sent twice (an exporter retrying a batch the broker had taken) is kept once: a
second copy of a retrieved document or an answer would change what the judge reads. The same
holds for the trace's GenAI log records (``OTLP_LOGS_TOPIC``), which are kept beside the spans
within bounds of their own (as many records as spans, a quarter of the bytes): the first
ones, for they carry the input, then the latest, for the answer comes last.

Sizes are estimates of the Python objects held (``sys.getsizeof`` of each text, plus a dict
entry's cost), cheap enough for the few spans kept; the decoder has already cut each value
(``inputs/otlp/values.py``).
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from consumer.telemetry.spans import LogEvent, Span

NUMBER_BYTES = 32  # an int or float object
ENTRY_BYTES = 40  # a dict entry beyond its key and value objects
SPAN_BYTES = 400  # the span object, its attribute dict and ids
MAX_LET_GO_IDS = 10_000
MIN_CUT_CHARS = 1_000  # a value is never cut shorter than this
CUT_MARK = "..."  # ASCII: "…" would store a Latin-1 text at twice its width


class KeptSpans:
    """The first spans (up to half the bounds) and the latest (the other half)."""

    __slots__ = ("_head", "_head_bytes", "_ids", "_log_keys", "_logs", "_logs_bytes",
                 "_max_bytes", "_max_spans", "_tail", "_tail_bytes", "capped", "duplicates",
                 "let_go")

    def __init__(self, max_spans: int, max_bytes: int) -> None:
        self._max_spans = (max_spans - max_spans // 2, max_spans // 2)  # (head, tail)
        self._max_bytes = (max_bytes - max_bytes // 2, max_bytes // 2)
        self._head: list[Span] = []
        self._head_bytes = 0
        self._tail: deque[tuple[Span, int]] = deque()
        self._tail_bytes = 0
        self._ids: set[str] = set()  # of the spans held
        self.let_go: set[str] = set()  # ids of spans not kept, or let go for later ones
        self.capped = 0  # spans not kept, or let go for later ones
        self.duplicates = 0  # spans (or log records) sent again, ignored
        self._logs: list[LogEvent] = []
        self._logs_bytes = 0
        self._log_keys: set[tuple[str | None, str, int, int]] = set()

    @property
    def dropped(self) -> int:
        """Spans not kept, for whatever reason."""
        return self.capped + self.duplicates

    @property
    def size(self) -> int:
        """The estimated bytes held."""
        return self._head_bytes + self._tail_bytes + self._logs_bytes

    def __len__(self) -> int:
        return len(self._head) + len(self._tail)

    def logs(self) -> tuple[LogEvent, ...]:
        """The kept log records, in arrival order."""
        return tuple(self._logs)

    def add_log(self, record: LogEvent) -> int:
        """Keep a GenAI log record if its bounds allow; return the bytes it adds."""
        event = record.event
        key = (record.span_id, event.name, event.time_unix_nano, hash(repr(event.attributes)))
        if key in self._log_keys:
            self.duplicates += 1
            return 0
        size = event_bytes(event.name, event.attributes)
        if (len(self._logs) >= sum(self._max_spans)
                or self._logs_bytes + size > self._max_bytes[1] // 2):
            self.capped += 1
            return 0
        self._log_keys.add(key)
        self._logs.append(record)
        self._logs_bytes += size
        return size

    def spans(self) -> tuple[Span, ...]:
        """The kept spans, in arrival order (the first, then the latest)."""
        return (*self._head, *(span for span, _ in self._tail))

    def add(self, span: Span) -> int:
        """Keep ``span`` if the bounds allow (letting older latest ones go); return the change
        in bytes held, which may be negative."""
        if span.span_id in self._ids:
            self.duplicates += 1
            return 0
        max_spans, max_bytes = self._max_spans, self._max_bytes
        # A span alone takes at most a quarter of the bound: the first and the latest halves
        # each keep two such spans at least (a retriever and the call that read its documents).
        span, size = fitted(span, max_bytes[1] // 2)
        if len(self._head) < max_spans[0] and self._head_bytes + size <= max_bytes[0]:
            self._head.append(span)
            self._head_bytes += size
            self._ids.add(span.span_id)
            return size
        if size > max_bytes[1] or max_spans[1] == 0:  # cut as far as it goes, still too big
            self._let_go(span)
            return 0
        before = self._tail_bytes
        self._tail.append((span, size))
        self._tail_bytes += size
        self._ids.add(span.span_id)
        while len(self._tail) > max_spans[1] or self._tail_bytes > max_bytes[1]:
            gone, gone_size = self._tail.popleft()
            self._tail_bytes -= gone_size
            self._ids.discard(gone.span_id)
            self._let_go(gone)
        return self._tail_bytes - before

    def _let_go(self, span: Span) -> None:
        self.capped += 1
        if len(self.let_go) < MAX_LET_GO_IDS:
            self.let_go.add(span.span_id)


def fitted(span: Span, limit: int) -> tuple[Span, int]:
    """The span and its size, its largest text attributes cut (never below
    ``MIN_CUT_CHARS``) when it is over ``limit``."""
    size = span_bytes(span)
    if size <= limit:
        return span, size
    attributes = dict(span.attributes)
    longest = sorted((key for key, value in attributes.items() if isinstance(value, str)
                      and len(value) > MIN_CUT_CHARS), key=lambda k: -len(attributes[k]))
    for key in longest:
        value: str = attributes[key]
        excess_chars = (size - limit) // max(1, _char_width(value)) + 1 + len(CUT_MARK)
        keep = max(MIN_CUT_CHARS, len(value) - excess_chars)
        attributes[key] = value[:keep] + CUT_MARK
        size += sys.getsizeof(attributes[key]) - sys.getsizeof(value)
        if size <= limit:
            break
    return replace(span, attributes=attributes), size


def span_bytes(span: Span) -> int:
    """An estimate of the memory a span holds: its name, attributes and events."""
    total = SPAN_BYTES + sys.getsizeof(span.name) + _mapping_bytes(span.attributes)
    for event in span.events:
        total += event_bytes(event.name, event.attributes)
    return total


def event_bytes(name: str, attributes: Mapping[str, Any]) -> int:
    """An estimate of the memory an event (or log record) holds."""
    return sys.getsizeof(name) + _mapping_bytes(attributes)


def _mapping_bytes(attributes: Mapping[str, Any]) -> int:
    # Every kept span is sized as it is added: the keys summed in C, and a plain text value
    # (nearly all of them) sized without the dispatch of ``_value_bytes``.
    total = ENTRY_BYTES * len(attributes) + sum(map(sys.getsizeof, attributes))
    for value in attributes.values():
        total += sys.getsizeof(value) if type(value) is str else _value_bytes(value)
    return total


def _value_bytes(value: Any) -> int:
    if isinstance(value, str | bytes):
        return sys.getsizeof(value)
    if isinstance(value, tuple | list):
        return sys.getsizeof(value) + sum(_value_bytes(item) for item in value)
    if isinstance(value, Mapping):
        return sys.getsizeof(value) + _mapping_bytes(value)
    return NUMBER_BYTES


def _char_width(text: str) -> int:
    """Bytes per character of a str as CPython stores it (1, 2 or 4)."""
    return max(1, (sys.getsizeof(text) - sys.getsizeof("")) // max(1, len(text)))
