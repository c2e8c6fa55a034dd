"""The hand-labelled traces of the deterministic rules (``data/rules-sample.jsonl``) (pure).

Each line is a ``trace_json`` event, so the file also feeds ``check`` and ``load-sample``
as it is, plus ``labels`` (rule name -> ``pass``, ``fail`` or ``not_applicable``) and a
``note`` saying what the row tests. The labels are the rules' spec: a unit test holds every
rule to all of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from consumer.jsonl import numbered_lines, read_text
from schemas.trace import TraceEvent

RULES_SAMPLE = Path(__file__).parents[1] / "data" / "rules-sample.jsonl"
RULE_LABELS = ("pass", "fail", "not_applicable")


@dataclass(frozen=True, slots=True)
class LabelledTrace:
    """One trace and what each rule should find of it."""

    trace: TraceEvent
    labels: dict[str, str]  # rule name -> one of RULE_LABELS
    note: str = ""


def read_rules_sample(path: Path = RULES_SAMPLE) -> list[LabelledTrace]:
    """The labelled traces; ValueError ``PATH:LINE: why`` for the first bad row."""
    rows = []
    for number, line in numbered_lines(read_text(path)):
        try:
            row = json.loads(line)
            labels = row.get("labels") if isinstance(row, dict) else None
            if not isinstance(labels, dict) or not all(
                    isinstance(name, str) and label in RULE_LABELS
                    for name, label in labels.items()):
                raise ValueError(f"labels must map rule names to one of {RULE_LABELS}")
            trace = TraceEvent.model_validate(row)
        except (ValueError, ValidationError) as exc:
            detail = str(exc).splitlines()[0]
            raise ValueError(f"{path}:{number}: {detail}") from exc
        rows.append(LabelledTrace(trace, labels, str(row.get("note") or "")))
    return rows
