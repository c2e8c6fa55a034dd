"""``groundedness eval --format rules``: how far each rule agrees with hand-made labels.

The dataset is trace events with ``labels`` (rule name -> ``pass``, ``fail`` or
``not_applicable``), as the bundled ``consumer/data/rules-sample.jsonl`` (read by
``consumer.evaluation.labelled_rules``). Every deterministic rule the dataset has labels for is
run (they
are free: no judge, no key), ``groundedness`` only when ``RULES`` names it and the dataset
labels it (it costs judge calls); the rules of ``RULES`` first, in its order. Each is built as
``run`` builds it (``CITATION_PATTERN`` included) and run through the same ``RuleSet``.

Per rule, over the rows labelled for it, what the rule found (``pass``, ``fail``,
``not_applicable`` where it did not apply, ``error``) against the label: the accuracy (found
equals the label), the applies accuracy (it applied exactly where the label says it does),
the confusion (label -> found -> rows), and every disagreement with the verdict's reason and
the row's note.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from consumer import wiring
from consumer.errors import ConfigError
from consumer.evaluation.in_order import evaluate_in_order
from consumer.evaluation.labelled_rules import RULE_LABELS, LabelledTrace, read_rules_sample
from consumer.ops.progress import Reporter
from consumer.rules.registry import GROUNDEDNESS, KNOWN_RULES
from consumer.rules.rule_set import RuleSet
from consumer.settings import SCORE_REQUIRED, Settings, threshold_line
from consumer.wiring import max_in_flight
from schemas.verdict import VerdictEvent

NOT_APPLICABLE = "not_applicable"
FOUND = ("pass", "fail", NOT_APPLICABLE, "error")  # what a rule can find of a row


def read_rule_dataset(path: Path) -> list[LabelledTrace]:
    """The labelled traces; one bad row, or a label for a rule nobody knows, refuses the file."""
    try:
        rows = read_rules_sample(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--dataset: cannot read {path}: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"--dataset: {exc}") from exc
    if not rows:
        raise ConfigError(f"--dataset: {path} holds no labelled trace")
    for row in rows:
        unknown = [name for name in row.labels if name not in KNOWN_RULES]
        if unknown:
            raise ConfigError(
                f"--dataset: {path}: trace {row.trace.trace_id!r} labels unknown rule "
                f"{unknown[0]!r}; the known rules are {', '.join(KNOWN_RULES)}")
    return rows


async def evaluate_rules(settings: Settings, rows: Sequence[LabelledTrace]) -> dict[str, Any]:
    """Run the rules the rows have labels for (see the module docstring); the report
    ``eval --json`` writes."""
    labelled = {name for row in rows for name in row.labels}
    runnable = [name for name in (*settings.rules, *KNOWN_RULES)
                if name in labelled and (name != GROUNDEDNESS or name in settings.rules)]
    run = list(dict.fromkeys(runnable))
    if not run:
        raise ConfigError(
            "--dataset has labels for groundedness alone, and RULES "
            f"({','.join(settings.rules)}) does not name it: nothing to measure")
    judging = GROUNDEDNESS in run
    if judging and settings.min_acceptable_score is None:
        raise ConfigError(threshold_line(SCORE_REQUIRED))
    rules = make_rules_named(settings, run, select=False)  # every labelled row is measured
    assert rules is not None  # noqa: S101 - run names at least one rule
    found: list[dict[str, VerdictEvent]] = []
    try:
        with Reporter("eval", len(rows)) as progress:
            results = evaluate_in_order((rules.evaluate(row.trace) for row in rows),
                                        max_in_flight(settings))
            async for evaluated in results:
                found.append({e.verdict.rule: e.verdict for e in evaluated.evaluations})
                progress.advance()
    finally:
        await rules.close()
    return {
        "format": "rules",
        "rows": len(rows),
        "rules_run": run,
        "rules_without_labels": [name for name in settings.rules if name not in labelled],
        "labels_not_run": sorted(labelled - set(run)),
        "judge_model": _answering_model(found, settings) if judging else None,
        "threshold": settings.threshold if judging else None,
        "rules": {name: rule_agreement(name, rows, found) for name in run},
    }


def _answering_model(found: Sequence[dict[str, VerdictEvent]], settings: Settings) -> str:
    """The model named by most groundedness verdicts (the one that answered), else
    ``JUDGE_MODEL``."""
    named = Counter(verdicts[GROUNDEDNESS].judge_model for verdicts in found
                    if GROUNDEDNESS in verdicts and verdicts[GROUNDEDNESS].judge_model)
    return str(named.most_common(1)[0][0]) if named else settings.judge_model


def rule_agreement(
    name: str, rows: Sequence[LabelledTrace], found: Sequence[dict[str, VerdictEvent]]
) -> dict[str, Any]:
    """One rule's agreement with the rows labelled for it (pure); ``found[i]`` holds row
    ``i``'s verdicts by rule."""
    confusion = {label: dict.fromkeys(FOUND, 0) for label in RULE_LABELS}
    agree = applies_agree = 0
    versions: Counter[str] = Counter()
    disagreements: list[dict[str, Any]] = []
    for row, verdicts in zip(rows, found, strict=True):
        label = row.labels.get(name)
        if label is None:
            continue
        verdict = verdicts.get(name)
        outcome = verdict.verdict if verdict is not None else NOT_APPLICABLE
        if verdict is not None:
            versions[verdict.prompt_version] += 1
        confusion[label][outcome] += 1
        agree += outcome == label
        applies_agree += (outcome == NOT_APPLICABLE) == (label == NOT_APPLICABLE)
        if outcome != label:
            disagreements.append({
                "trace_id": row.trace.trace_id, "label": label, "found": outcome,
                "reason": verdict.reason if verdict is not None else None, "note": row.note,
            })
    count = sum(sum(cells.values()) for cells in confusion.values())
    return {
        "version": versions.most_common(1)[0][0] if versions else None,
        "labelled": count,
        "agree": agree,
        "accuracy": agree / count if count else None,
        "applies_accuracy": applies_agree / count if count else None,
        "confusion": confusion,
        "disagreements": disagreements,
    }


def make_rules_named(settings: Settings, names: Sequence[str], *,
                     select: bool = True) -> RuleSet | None:
    """The rules ``names`` (known ones), in that order, as ``run`` builds them; None for
    none. ``select``: whether ``SAMPLE_RATE`` and ``TRACE_FILTER`` apply."""
    if not names:
        return None
    return wiring.make_rules(settings, names=names, select=select)
