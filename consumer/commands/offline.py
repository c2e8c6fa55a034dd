"""``groundedness check`` and ``groundedness eval``: the judge without Kafka.

Both read traces from a file, judge them concurrently (the judge holds at most
``JUDGE_MAX_CONCURRENCY`` calls; at most ``max_in_flight`` evaluations are started ahead) and
take the results in input order. ``check`` prints one verdict JSON line per trace; ``eval``
compares the verdicts with labels (``consumer.commands.calibration``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from consumer.commands.calibration import Confusion, best_threshold, confusion, roc_auc
from consumer.commands.progress import Reporter
from consumer.errors import ConfigError, DecodeError
from consumer.evaluate import Evaluation, Evaluator
from consumer.jsonl import numbered_lines, parse_labelled, read_text
from consumer.settings import Settings
from consumer.stream.decode import decode_trace
from consumer.wiring import make_evaluator, max_in_flight
from schemas.trace import TraceEvent

EXIT_OK = 0
EXIT_NOT_ALL_JUDGED = 1


async def evaluate_in_order(
    evaluator: Evaluator, traces: Iterable[TraceEvent], limit: int
) -> AsyncIterator[Evaluation]:
    """Evaluate concurrently, at most ``limit`` started ahead; yield in input order."""
    pending: deque[asyncio.Task[Evaluation]] = deque()
    try:
        for trace in traces:
            if len(pending) >= limit:
                yield await pending.popleft()
            pending.append(asyncio.create_task(evaluator.evaluate(trace)))
        while pending:
            yield await pending.popleft()
    finally:
        for task in pending:
            task.cancel()


# -- check ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Numbered:
    """A trace and the input line it came from."""

    line: int
    trace: TraceEvent


def read_traces(text: str) -> tuple[list[Numbered], list[str]]:
    """The traces in one JSON document or in JSON lines, and a message per unusable line."""
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    chunks = [(1, text)] if isinstance(whole, dict) else numbered_lines(text)
    traces: list[Numbered] = []
    problems: list[str] = []
    for number, chunk in chunks:
        try:
            traces.append(Numbered(number, decode_trace(chunk.encode("utf-8", "surrogatepass"))))
        except DecodeError as exc:
            problems.append(f"line {number}: {exc.reason}")
    return traces, problems


async def check(settings: Settings, text: str) -> int:
    """Print a verdict line per trace, in input order; the exit code."""
    evaluator = make_evaluator(settings)  # refuses without an API key, before reading
    traces, problems = read_traces(text)
    for problem in problems:
        print(f"check: {problem}", file=sys.stderr)
    judged: list[Numbered] = []
    for item in traces:
        if item.trace.has_output:
            judged.append(item)
        else:
            print(
                f"check: line {item.line}: trace {item.trace.trace_id!r} has an empty output: "
                "not evaluated, no verdict", file=sys.stderr,
            )
    errors = 0
    try:
        results = evaluate_in_order(
            evaluator, (item.trace for item in judged), max_in_flight(settings)
        )
        async for evaluation in results:
            errors += evaluation.verdict.verdict == "error"
            print(evaluation.verdict.model_dump_json(), flush=True)
    finally:
        await evaluator.judge.close()
    return EXIT_NOT_ALL_JUDGED if errors or problems else EXIT_OK


# -- eval -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Labelled:
    """A trace and whether its label says it is ungrounded."""

    trace: TraceEvent
    ungrounded: bool


def read_dataset(path: Path) -> list[Labelled]:
    """Labelled JSON lines (``input``, ``documents``, ``output``, ``label``); one bad row refuses
    the file with its line number."""
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--dataset: cannot read {path}: {exc}") from exc
    try:
        labelled = parse_labelled(text, str(path))
    except ValueError as exc:
        raise ConfigError(f"--dataset: {exc}") from exc
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


async def evaluate_dataset(settings: Settings, rows: list[Labelled]) -> dict[str, Any]:
    """Judge every row with a progress bar; the metrics as ``eval --json`` writes them."""
    evaluator = make_evaluator(settings)
    judged = [row for row in rows if row.trace.has_output]
    ungrounded: list[bool] = []
    failed: list[bool] = []
    scores: list[float] = []
    errors = 0
    try:
        with Reporter("eval", len(judged)) as progress:
            results = evaluate_in_order(
                evaluator, (row.trace for row in judged), max_in_flight(settings)
            )
            index = 0
            async for evaluation in results:
                verdict = evaluation.verdict
                row, index = judged[index], index + 1
                progress.advance()
                if verdict.verdict == "error" or verdict.score is None:
                    errors += 1
                    continue
                ungrounded.append(row.ungrounded)
                failed.append(verdict.verdict == "fail")
                scores.append(verdict.score)
    finally:
        await evaluator.judge.close()
    return metrics_report(settings, len(rows), len(rows) - len(judged), errors,
                          ungrounded, failed, scores)


def metrics_report(
    settings: Settings, rows: int, skipped: int, errors: int,
    ungrounded: list[bool], failed: list[bool], scores: list[float],
) -> dict[str, Any]:
    """Metrics at the configured threshold, AUC, the best threshold, scores per label."""
    cells: Confusion = confusion(ungrounded, failed)
    best = best_threshold(ungrounded, scores)
    distribution: dict[str, dict[str, int]] = {"grounded": {}, "ungrounded": {}}
    for is_ungrounded, score in zip(ungrounded, scores, strict=True):
        counts = distribution["ungrounded" if is_ungrounded else "grounded"]
        counts[f"{score:.2f}"] = counts.get(f"{score:.2f}", 0) + 1
    return {
        "judge_model": settings.judge_model,
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
