"""Some rules, for a command that runs other rules than ``RULES`` says.

``eval --format rules`` runs the rules its dataset has labels for, on every row (no sampling
or filter: it measures agreement). They are built by ``wiring.make_rules`` with other names,
so each rule is made as ``run`` makes it (``CITATION_PATTERN`` included), and a judge (with
its key) only when ``groundedness`` is among them.
"""

from __future__ import annotations

from collections.abc import Sequence

from consumer import wiring
from consumer.rules.rule_set import RuleSet
from consumer.settings import Settings


def make_rules_named(settings: Settings, names: Sequence[str], *,
                     select: bool = True) -> RuleSet | None:
    """The rules ``names`` (known ones), in that order, as ``run`` builds them; None for
    none. ``select``: whether ``SAMPLE_RATE`` and ``TRACE_FILTER`` apply."""
    if not names:
        return None
    return wiring.make_rules(settings, names=names, select=select)

