"""What the LLM calls of a trace whose answer was recorded nowhere did carry: the names a team
needs to see why (pure).

A candidate without an answer anywhere (``no_answer_found``) is most often a setup the worker
reads nothing from: content capture off, the content in log records on a topic the worker does
not read, or a convention it does not know. The attribute keys and event names of its LLM
spans say which; their values are not shown (they may be the very content, or secrets).
Flattened lists are folded (``llm.input_messages.N.message.role`` once, not per index) and the
names bounded, so one warning stays a line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from consumer.telemetry.conventions import is_llm_span
from consumer.telemetry.spans import Span

MAX_NAMES = 40  # attribute keys and event names together
MAX_EVENT_NAMES = 10  # of those, event names (they are few, and say most)
_INDEX = re.compile(r"(?<=\.)[0-9]+(?=\.|$)")


@dataclass(frozen=True, slots=True)
class NamesSeen:
    """The attribute keys and event names of a trace's LLM spans, sorted, within the bound."""

    attributes: tuple[str, ...]
    events: tuple[str, ...]
    left_out: int = 0  # names past the bound


def names_seen(spans: Iterable[Span]) -> NamesSeen:
    """The names on the trace's LLM spans (see the module docstring)."""
    calls = [span for span in spans if is_llm_span(span)]
    attributes = sorted({_INDEX.sub("N", key) for span in calls for key in span.attributes})
    events = sorted({event.name for span in calls for event in span.events})
    kept_events = events[:MAX_EVENT_NAMES]
    kept_attributes = attributes[:MAX_NAMES - len(kept_events)]
    left_out = len(attributes) + len(events) - len(kept_attributes) - len(kept_events)
    return NamesSeen(tuple(kept_attributes), tuple(kept_events), left_out)
