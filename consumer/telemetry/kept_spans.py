"""One open trace's GenAI spans, held within bounds on their count and size (pure).

A trace can carry far more than a judge needs (an agent looping for hours, a retriever
returning megabytes), and assembly holds thousands of traces at once, so each keeps at most
``max_spans`` spans and about ``max_bytes`` of attribute text. Over a bound it keeps the first
spans and the latest ones, dropping from the middle: the retrievers and the first call come
early, the final answer and the root's output come last (a span is exported when it ends, and
the outermost ends last), and both ends are what the mapping reads.

A span sent twice (an exporter retrying a batch the broker had taken) is kept once: a
second copy of a retrieved document or an answer would change what the judge reads.

Sizes are estimates (characters of keys and text values, 8 per number), cheap enough for
the few spans kept; the decoder has already cut each value (``otlp_values.py``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from consumer.telemetry.spans import Span

NUMBER_BYTES = 8


class KeptSpans:
    """The first spans (up to half the bounds) and the latest (the other half)."""

    __slots__ = ("_head", "_head_bytes", "_ids", "_max_bytes", "_max_spans", "_tail",
                 "_tail_bytes", "capped", "duplicates")

    def __init__(self, max_spans: int, max_bytes: int) -> None:
        self._max_spans = (max_spans - max_spans // 2, max_spans // 2)  # (head, tail)
        self._max_bytes = (max_bytes - max_bytes // 2, max_bytes // 2)
        self._head: list[Span] = []
        self._head_bytes = 0
        self._tail: deque[tuple[Span, int]] = deque()
        self._tail_bytes = 0
        self._ids: set[str] = set()  # of the spans held
        self.capped = 0  # spans not kept, or let go for later ones
        self.duplicates = 0  # spans sent again, ignored

    @property
    def dropped(self) -> int:
        """Spans not kept, for whatever reason."""
        return self.capped + self.duplicates

    @property
    def size(self) -> int:
        """The estimated bytes held."""
        return self._head_bytes + self._tail_bytes

    def __len__(self) -> int:
        return len(self._head) + len(self._tail)

    def spans(self) -> tuple[Span, ...]:
        """The kept spans, in arrival order (the first, then the latest)."""
        return (*self._head, *(span for span, _ in self._tail))

    def add(self, span: Span) -> int:
        """Keep ``span`` if the bounds allow (letting older latest ones go); return the change
        in bytes held, which may be negative."""
        if span.span_id in self._ids:
            self.duplicates += 1
            return 0
        size = span_bytes(span)
        max_spans, max_bytes = self._max_spans, self._max_bytes
        if len(self._head) < max_spans[0] and self._head_bytes + size <= max_bytes[0]:
            self._head.append(span)
            self._head_bytes += size
            self._ids.add(span.span_id)
            return size
        if size > max_bytes[1] or max_spans[1] == 0:  # alone over the bound: never kept
            self.capped += 1
            return 0
        before = self._tail_bytes
        self._tail.append((span, size))
        self._tail_bytes += size
        self._ids.add(span.span_id)
        while len(self._tail) > max_spans[1] or self._tail_bytes > max_bytes[1]:
            gone, gone_size = self._tail.popleft()
            self._tail_bytes -= gone_size
            self._ids.discard(gone.span_id)
            self.capped += 1
        return self._tail_bytes - before


def span_bytes(span: Span) -> int:
    """An estimate of what a span holds: its name, attributes and events."""
    total = len(span.name) + _mapping_bytes(span.attributes)
    for event in span.events:
        total += len(event.name) + _mapping_bytes(event.attributes)
    return total


def _mapping_bytes(attributes: Mapping[str, Any]) -> int:
    return sum(len(key) + _value_bytes(value) for key, value in attributes.items())


def _value_bytes(value: Any) -> int:
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, tuple | list):
        return sum(_value_bytes(item) for item in value)
    if isinstance(value, Mapping):
        return _mapping_bytes(value)
    return NUMBER_BYTES
