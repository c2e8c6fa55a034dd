"""A benchmark's figure computed the way it was published, beside the published ones (pure).

The figure is the benchmark's metric (``consumer.evaluation.benchmarks.sets``) computed per group
(AggreFact's ``dataset``, HaluBench's ``source_ds``) and averaged with equal weight over the
groups; a file without the group column gets the metric over all its rows. The metric pooled
over all rows is reported too. A verdict is the judge's decision at ``MIN_ACCEPTABLE_SCORE``
(``fail`` predicts unsupported), as the published figures are the judges' yes/no answers.
``error`` verdicts and empty answers are left out and counted, as ``eval`` does.

A group whose balanced accuracy is undefined (its rows judged carry one label only) is named
and left out of the mean: scikit-learn would report the recall of the one label there, which
would compare nothing with the published per-group figures (on the published test split every
dataset has both labels).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from consumer.evaluation.benchmarks.sets import BenchmarkSet, Metric, Published
from consumer.evaluation.calibration import confusion

Outcome = Literal["pass", "fail", "error", "skipped"]


@dataclass(frozen=True, slots=True)
class Judged:
    """One benchmark row's group, label and what became of it."""

    group: str | None
    ungrounded: bool
    outcome: Outcome


def benchmark_figures(
    benchmark: BenchmarkSet, judge_model: str, judged: Sequence[Judged]
) -> dict[str, Any]:
    """The ``benchmark`` part of ``eval --json``: the figure, per group, pooled, and the
    published figures with whether each is for the judge model."""
    names = sorted({row.group for row in judged if row.group is not None})
    groups = {name: _group(benchmark.metric, [row for row in judged if row.group == name])
              for name in names}
    values = [group["value"] for group in groups.values() if group["value"] is not None]
    pooled = _metric(benchmark.metric, judged)
    mean = sum(values) / len(values) if values else None
    return {
        "name": benchmark.name,
        "format": benchmark.format,
        "metric": benchmark.metric,
        "group_column": benchmark.group_column if names else None,
        "value": mean if names else pooled,
        "groups_averaged": len(values) if names else None,
        "groups_without_value": [name for name, group in groups.items()
                                 if group["value"] is None],
        "pooled": pooled,
        "groups": groups,
        "published": [_published(entry, judge_model) for entry in benchmark.published],
    }


def matches_judge(published: Published, judge_model: str) -> bool:
    """Is ``judge_model`` the published model: its name, its family's name, or a dated snapshot
    of the family (``gpt-4o-2024-08-06`` is gpt-4o; ``gpt-4o-mini`` is not)."""
    model = judge_model.strip().lower()
    family = published.family.lower()
    return (model in (published.model.lower(), family)
            or re.fullmatch(re.escape(family) + r"-\d{4}-\d{2}-\d{2}", model) is not None)


def _group(metric: Metric, rows: Sequence[Judged]) -> dict[str, Any]:
    return {
        "count": sum(1 for row in rows if row.outcome in ("pass", "fail")),
        "errors": sum(1 for row in rows if row.outcome == "error"),
        "skipped": sum(1 for row in rows if row.outcome == "skipped"),
        "value": _metric(metric, rows),
    }


def _metric(metric: Metric, rows: Sequence[Judged]) -> float | None:
    decided = [row for row in rows if row.outcome in ("pass", "fail")]
    cells = confusion([row.ungrounded for row in decided],
                      [row.outcome == "fail" for row in decided])
    return cells.balanced_accuracy if metric == "balanced_accuracy" else cells.accuracy


def _published(entry: Published, judge_model: str) -> dict[str, Any]:
    return {
        "model": entry.model,
        "value": entry.value,
        "per_group": dict(entry.per_group),
        "matches_judge": matches_judge(entry, judge_model),
        "source": entry.source,
    }
