"""Every rule the worker knows, by the name ``RULES`` lists it under, and the reading of
``RULES`` (pure).

Adding a deterministic rule is one module beside this one and one line in ``REGISTRY``.
``groundedness`` is known here by name only: its rule is the judge, which the composition
root builds from the judge's settings (``consumer/wiring.py``), not from ``RuleOptions``.

``RULES`` is a comma list, read case-insensitively with spaces and empty items ignored. A
name listed twice is collapsed to its first place: one verdict per trace and rule whatever
the list says, so the duplicate cannot change what is published, and a start refused for it
would stop a worker over nothing. An unknown name is refused with one line naming the known
ones; so is a list that names none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from consumer.rules.answered_without_tool import AnsweredWithoutTool
from consumer.rules.base import DeterministicRule
from consumer.rules.linear_regex import LinearPattern
from consumer.rules.missing_citation import MissingCitation

GROUNDEDNESS = "groundedness"


@dataclass(frozen=True, slots=True)
class RuleOptions:
    """What the settings say of the deterministic rules."""

    citation_pattern: LinearPattern | None = None  # CITATION_PATTERN, compiled
    secrets: tuple[str, ...] = ()  # redacted from what a rule's reason quotes


REGISTRY: dict[str, Callable[[RuleOptions], DeterministicRule]] = {
    MissingCitation.name: lambda options: MissingCitation(options.citation_pattern,
                                                          options.secrets),
    AnsweredWithoutTool.name: lambda options: AnsweredWithoutTool(options.secrets),
}
KNOWN_RULES = (GROUNDEDNESS, *REGISTRY)


def parse_rules(value: str) -> tuple[str, ...]:
    """The rule names of a ``RULES`` value, in order, each once; ValueError for an unknown
    name or an empty list."""
    names = [item.strip().lower() for item in value.split(",")]
    listed = tuple(dict.fromkeys(name for name in names if name))
    known = ", ".join(KNOWN_RULES)
    unknown = [name for name in listed if name not in KNOWN_RULES]
    if unknown:
        raise ValueError(f"unknown rule {unknown[0]!r}; the known rules are {known}")
    if not listed:
        raise ValueError(f"names no rule; the known rules are {known}")
    return listed


def build_rules(names: Sequence[str], options: RuleOptions) -> tuple[DeterministicRule, ...]:
    """The deterministic rules among ``names`` (``groundedness`` is the judge's), in order."""
    return tuple(REGISTRY[name](options) for name in names if name != GROUNDEDNESS)
