"""How ``groundedness eval`` shows its metrics: a table, and the score distribution plot; for
``--format rules``, each rule's agreement with the labels and where they disagree."""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path
from typing import Any

from rich.table import Table

from consumer.errors import ConfigError


def eval_table(report: dict[str, Any], dataset: str) -> Table:
    """The metrics for people (positive class: ungrounded, predicted by a fail verdict)."""
    table = Table(title=f"eval of {_judge_title(report)} on {dataset}")
    table.add_column("")
    table.add_column("value", justify="right")
    table.add_row("rows / judged with a score", f"{report['rows']} / {report['count']}")
    table.add_row("errors (excluded)", str(report["errors"]))
    table.add_row("skipped (empty output)", str(report["skipped"]))
    table.add_section()
    table.add_row(f"at MIN_ACCEPTABLE_SCORE={report['threshold']:g}", "")
    for key in ("balanced_accuracy", "precision", "recall", "f1"):
        table.add_row(f"  {key.replace('_', ' ')} (ungrounded)", _number(report[key]))
    cells = report["confusion"]
    table.add_row("  ungrounded judged fail / pass",
                  f"{cells['ungrounded']['fail']} / {cells['ungrounded']['pass']}")
    table.add_row("  grounded judged fail / pass",
                  f"{cells['grounded']['fail']} / {cells['grounded']['pass']}")
    table.add_section()
    table.add_row("ROC AUC (1 - score)", _number(report["roc_auc"]))
    best = report["best_threshold"]
    best_text = "-" if best is None else (
        f"{best:g} (balanced accuracy {report['best_threshold_balanced_accuracy']:.3f})")
    table.add_row("best threshold", best_text)
    return table


def benchmark_table(report: dict[str, Any]) -> Table:
    """A benchmark's figure per group and averaged, in percent as published, beside the
    published figures (the one for the judge's own model marked ``same model``)."""
    bench = report["benchmark"]
    group = bench["group_column"]
    published = bench["published"]
    notes = [f"mean: the {group} values averaged with equal weight, as published; "
             "pooled: all rows as one" if group
             else "over all rows: the file has no group column to average over, as published"]
    if bench["groups_without_value"]:
        notes.append(f"not averaged (one label only): {', '.join(bench['groups_without_value'])}")
    published_groups = {name for entry in published for name in entry["per_group"]}
    if group and published_groups and set(bench["groups"]) != published_groups:
        shared = len(published_groups & set(bench["groups"]))
        notes.append(f"the published means are over {len(published_groups)} {group} "
                     f"values; this file has {shared} of them")
    notes.append(f"published: {'; '.join(sorted({entry['source'] for entry in published}))}")
    table = Table(title=f"{bench['name']}: {bench['metric'].replace('_', ' ')} of "
                        f"{report['judge_model']}", caption="\n".join(notes))
    table.add_column(group or "")
    table.add_column("judged", justify="right")
    table.add_column("errors", justify="right")
    table.add_column(f"{_model_header(report['judge_model'])}\nthis run", justify="right")
    for entry in published:
        mark = "\nsame model" if entry["matches_judge"] else ""
        table.add_column(f"{_model_header(entry['model'])}\npublished{mark}", justify="right")
    for name, counts in bench["groups"].items():
        table.add_row(name, str(counts["count"]), str(counts["errors"]),
                      _percent(counts["value"]),
                      *(_percent(entry["per_group"].get(name)) for entry in published))
    if bench["groups"]:
        table.add_section()
    table.add_row("mean" if group else "all rows", str(report["count"]), str(report["errors"]),
                  _percent(bench["value"]), *(_percent(entry["value"]) for entry in published))
    if group:
        table.add_row("pooled", "", "", _percent(bench["pooled"]), *("-" for _ in published))
    return table


MAX_DISAGREEMENTS_SHOWN = 20  # the rest are in --json


def rules_tables(report: dict[str, Any], dataset: str) -> list[Table]:
    """Each rule's agreement, its confusion (labels down, what the rule found across), and the
    disagreements (the first ``MAX_DISAGREEMENTS_SHOWN``)."""
    notes = []
    if report["rules_without_labels"]:
        notes.append(f"in RULES, no labels: {', '.join(report['rules_without_labels'])}")
    if report["labels_not_run"]:
        notes.append(f"labelled, not in RULES: {', '.join(report['labels_not_run'])}")
    summary = Table(title=f"eval of the rules on {dataset} ({report['rows']} traces)",
                    caption="\n".join(notes) or None)
    for header in ("rule", "labelled", "agree", "accuracy", "applies accuracy"):
        summary.add_column(header, justify="left" if header == "rule" else "right")
    tables = [summary]
    disagreements = Table(title="disagreements with the labels")
    for header in ("rule", "trace", "label", "found", "reason"):
        disagreements.add_column(header)
    shown = more = 0
    for name, rule in report["rules"].items():
        title = rule["version"] or name  # name@version, once the rule gave a verdict
        summary.add_row(title, str(rule["labelled"]), str(rule["agree"]),
                        _percent_of(rule["accuracy"]), _percent_of(rule["applies_accuracy"]))
        tables.append(_confusion_table(title, rule["confusion"]))
        for row in rule["disagreements"]:
            if shown == MAX_DISAGREEMENTS_SHOWN:
                more += 1
                continue
            shown += 1
            disagreements.add_row(name, row["trace_id"], row["label"], row["found"],
                                  row["reason"] or "-")
    if shown:
        if more:
            disagreements.caption = f"and {more} more in the --json report"
        tables.append(disagreements)
    return tables


def _confusion_table(title: str, confusion: dict[str, dict[str, int]]) -> Table:
    table = Table(title=f"{title}: label (rows) against what it found")
    table.add_column("label")
    found = list(next(iter(confusion.values())))
    for kind in found:
        table.add_column(kind.replace("_", " "), justify="right")
    for label, cells in confusion.items():
        table.add_row(label.replace("_", " "), *(str(cells[kind]) for kind in found))
    return table


def plot_scores(path: Path, report: dict[str, Any]) -> None:
    """Bars of the score distribution per label, with the best and configured thresholds."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError(
            "--plot needs matplotlib: pip install 'groundedness-worker[plot]'"
        ) from exc
    scores: dict[str, dict[str, int]] = report["scores"]
    values = sorted({float(key) for counts in scores.values() for key in counts})
    figure, axes = plt.subplots(figsize=(7.5, 4.2))
    colours = {"grounded": "#2a9d8f", "ungrounded": "#e76f51"}
    # On the score axis itself: each score's two bars start at it and end before the next
    # score, so a threshold line at t stands at t, with the bars that pass (score >= t) on
    # its right and those that fail on its left.
    width = bar_width(values)
    tallest = 1
    for offset, label in ((0.0, "grounded"), (width, "ungrounded")):
        counts = [scores[label].get(f"{value:.2f}", 0) for value in values]
        tallest = max(tallest, *counts)
        axes.bar([value + offset for value in values], counts, width=width, align="edge",
                 color=colours[label], label=f"{label} (n={sum(counts)})")
    axes.set_ylim(0, tallest * 1.35)  # room for the legend above the bars
    axes.set_xlim(min(0.0, *values) - width, max(1.0, *values) + 3 * width)
    axes.set_xticks(values, [f"{value:g}" for value in values])
    axes.set_xlabel("score (each score's bars start at it; pass when score ≥ threshold)")
    axes.set_ylabel("traces")

    best = report["best_threshold"]
    configured = report["threshold"]
    same = best is not None and abs(configured - best) < 1e-9
    if best is not None:
        accuracy = report["best_threshold_balanced_accuracy"]
        also = " (= MIN_ACCEPTABLE_SCORE)" if same else ""
        axes.axvline(best, color="black", linestyle="--",
                     label=f"best threshold {best:g}{also}: balanced accuracy {accuracy:.3f}")
    if not same:
        axes.axvline(configured, color="grey", linestyle=":",
                     label=f"MIN_ACCEPTABLE_SCORE {configured:g}")
    axes.set_title(f"Judge scores by label: {report['judge_model']}, {report['count']} traces")
    axes.legend(loc="upper right", fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def bar_width(values: list[float]) -> float:
    """One bar's width on the score axis: two side by side fill 80% of the closest gap
    between scores (0.1 on the judge's quarter steps)."""
    gaps = [high - low for low, high in pairwise(values)]
    return 0.4 * min([0.25, *gaps])


def _judge_title(report: dict[str, Any]) -> str:
    """The model that answered, and the one asked for when that is another name."""
    asked = report.get("judge_model_asked")
    model = str(report["judge_model"])
    return model if asked in (None, model) else f"{model} (JUDGE_MODEL {asked})"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _percent_of(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}"


def _model_header(model: str) -> str:
    """A model name with its snapshot date on a line of its own, to keep columns narrow."""
    return re.sub(r"-(\d{4}-\d{2}-\d{2})$", r"\n\1", model)
