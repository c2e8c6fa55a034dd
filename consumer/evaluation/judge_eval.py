"""``groundedness eval``: the judge's verdicts against labels, without Kafka.

The rows come from the worker's labelled JSON lines or a public benchmark's file
(``benchmarks/sets.py``); they are judged concurrently and in input order (``in_order.py``),
and compared with their labels (``calibration.py``). The rules' labels of ``--format rules``
are ``rule_eval.py``'s.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from consumer.errors import ConfigError
from consumer.evaluation.benchmarks.scores import Judged, benchmark_figures
from consumer.evaluation.benchmarks.sets import BENCHMARKS, BenchmarkSet, read_benchmark
from consumer.evaluation.calibration import Confusion, best_threshold, confusion, roc_auc
from consumer.evaluation.in_order import evaluate_in_order
from consumer.jsonl import numbered_lines, parse_labelled, read_text
from consumer.ops.progress import Reporter
from consumer.settings import Settings
from consumer.wiring import make_evaluator, max_in_flight
from schemas.trace import Document, TraceEvent


@dataclass(frozen=True, slots=True)
class Labelled:
    """A trace, whether its label says it is ungrounded, and its benchmark group (AggreFact's
    ``dataset``, HaluBench's ``source_ds``; None in labelled JSON lines)."""

    trace: TraceEvent
    ungrounded: bool
    group: str | None = None


def read_dataset(path: Path, dataset_format: str = "labelled") -> list[Labelled]:
    """Labelled JSON lines (``input``, ``documents``, ``output``, ``label``), or a benchmark's
    file (``aggrefact``, ``halubench``: CSV, JSON lines or Parquet); one bad row refuses the
    file, naming where it is."""
    if dataset_format in BENCHMARKS:
        return _read_benchmark_rows(path, BENCHMARKS[dataset_format])
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--dataset: cannot read {path}: {exc}") from exc
    try:
        labelled = parse_labelled(text, str(path))
    except ValueError as exc:
        hint = " (labels per rule: read it with --format rules)" if _labels_per_rule(text) else ""
        raise ConfigError(f"--dataset: {exc}{hint}") from exc
    rows: list[Labelled] = []
    for row in labelled:
        try:
            trace = TraceEvent.model_validate({
                "trace_id": row.id,
                "input": row.input,
                "output": row.output,
                "retrieved_documents": row.documents,
            })
        except ValidationError as exc:
            detail = str(exc).splitlines()[0]
            raise ConfigError(f"--dataset: {path}:{row.line}: {detail}") from exc
        rows.append(Labelled(trace, not row.grounded))
    return rows


def sniff_dataset_format(path: Path) -> str:
    """``eval``'s format when ``--format`` is not given: ``rules`` for a file whose first line
    holds ``labels`` (rule -> label), else ``labelled`` (which names any problem reading it)."""
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError):
        return "labelled"
    return "rules" if _labels_per_rule(text) else "labelled"


def _labels_per_rule(text: str) -> bool:
    """Does the first line hold ``labels`` (rule -> label), as ``--format rules`` reads?"""
    for _, line in numbered_lines(text):
        try:
            first = json.loads(line)
        except (ValueError, RecursionError):
            return False
        return isinstance(first, dict) and isinstance(first.get("labels"), dict)
    return False


def _read_benchmark_rows(path: Path, benchmark: BenchmarkSet) -> list[Labelled]:
    """A benchmark's rows as traces: the answer (AggreFact's claim) judged against the context
    (its doc, HaluBench's passage) as the one retrieved document."""
    try:
        rows = read_benchmark(path, benchmark)
    except OSError as exc:
        raise ConfigError(f"--dataset: cannot read {path}: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"--dataset: {path}: {exc}") from exc
    labelled: list[Labelled] = []
    for row in rows:
        try:
            trace = TraceEvent(trace_id=row.id, input=row.input, output=row.answer,
                               retrieved_documents=[Document(content=row.context)])
        except ValidationError as exc:
            detail = str(exc).splitlines()[0]
            raise ConfigError(f"--dataset: {path}: {row.where}: {detail}") from exc
        labelled.append(Labelled(trace, not row.grounded, row.group))
    return labelled


async def evaluate_dataset(
    settings: Settings, rows: list[Labelled], benchmark: BenchmarkSet | None = None
) -> dict[str, Any]:
    """Judge every row with a progress bar; the metrics as ``eval --json`` writes them, with
    the ``benchmark`` figures when the rows are a benchmark's."""
    if not settings.judging:  # the labels are groundedness's: nothing else to measure here
        raise ConfigError(
            f"--dataset has groundedness labels, and RULES ({','.join(settings.rules)}) does "
            "not name groundedness: nothing to measure (--format rules reads labels per rule)")
    evaluator = make_evaluator(settings)
    judged = [row for row in rows if row.trace.has_output]
    ungrounded: list[bool] = []
    failed: list[bool] = []
    scores: list[float] = []
    outcomes = [Judged(row.group, row.ungrounded, "skipped")
                for row in rows if not row.trace.has_output]
    errors = 0
    answered_by: Counter[str] = Counter()
    try:
        with Reporter("eval", len(judged)) as progress:
            results = evaluate_in_order(
                (evaluator.evaluate(row.trace) for row in judged), max_in_flight(settings)
            )
            index = 0
            async for evaluation in results:
                verdict = evaluation.verdict
                row, index = judged[index], index + 1
                progress.advance()
                if verdict.judge_model is not None:
                    answered_by[verdict.judge_model] += 1
                if verdict.verdict == "error" or verdict.score is None:
                    errors += 1
                    outcomes.append(Judged(row.group, row.ungrounded, "error"))
                    continue
                is_fail = verdict.verdict == "fail"
                outcomes.append(Judged(row.group, row.ungrounded, "fail" if is_fail else "pass"))
                ungrounded.append(row.ungrounded)
                failed.append(is_fail)
                scores.append(verdict.score)
    finally:
        await evaluator.judge.close()
    report = metrics_report(settings, len(rows), len(rows) - len(judged), errors,
                            ungrounded, failed, scores, answering_model(answered_by, settings))
    if benchmark is not None:
        report["benchmark"] = benchmark_figures(benchmark, report["judge_model"], outcomes)
    return report


def answering_model(answered_by: Counter[str], settings: Settings) -> str:
    """The model the report is of: the one named by most verdicts (the model that answered, a
    snapshot behind an alias, the local judge's own name), else ``JUDGE_MODEL``."""
    return answered_by.most_common(1)[0][0] if answered_by else settings.judge_model


def metrics_report(
    settings: Settings, rows: int, skipped: int, errors: int,
    ungrounded: list[bool], failed: list[bool], scores: list[float],
    judge_model: str | None = None,
) -> dict[str, Any]:
    """Metrics at the configured threshold, AUC, the best threshold, scores per label;
    ``judge_model`` the model that answered (``JUDGE_MODEL`` unless given)."""
    cells: Confusion = confusion(ungrounded, failed)
    best = best_threshold(ungrounded, scores)
    distribution: dict[str, dict[str, int]] = {"grounded": {}, "ungrounded": {}}
    for is_ungrounded, score in zip(ungrounded, scores, strict=True):
        counts = distribution["ungrounded" if is_ungrounded else "grounded"]
        counts[f"{score:.2f}"] = counts.get(f"{score:.2f}", 0) + 1
    return {
        "judge_model": judge_model or settings.judge_model,
        "judge_model_asked": settings.judge_model,
        "threshold": settings.threshold,
        "rows": rows,
        "skipped": skipped,
        "errors": errors,
        "count": len(scores),
        "positive_class": "ungrounded",
        "balanced_accuracy": cells.balanced_accuracy,
        "precision": cells.precision,
        "recall": cells.recall,
        "f1": cells.f1,
        "specificity": cells.specificity,
        "confusion": cells.as_matrix(),
        "roc_auc": roc_auc(ungrounded, [1 - score for score in scores]),
        "best_threshold": best.threshold if best else None,
        "best_threshold_balanced_accuracy": best.balanced_accuracy if best else None,
        "scores": {label: dict(sorted(c.items())) for label, c in distribution.items()},
    }
