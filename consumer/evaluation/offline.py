"""``groundedness check`` and ``groundedness eval``: the rules without Kafka.

Both read traces from a file, evaluate them concurrently (the judge holds at most
``JUDGE_MAX_CONCURRENCY`` calls; at most ``max_in_flight`` traces are started ahead) and take
the results in input order. ``check`` runs every rule of ``RULES`` (with ``TRACE_FILTER``,
``SAMPLE_RATE``, the answer cache and prices, as ``run``) and prints one verdict JSON line per
trace and rule that applies, then on stderr a summary per rule, what was left out and why, and
what the judge cost; ``eval`` compares the judge's verdicts with labels
(``consumer.evaluation.calibration``), from the worker's labelled JSON lines or a public
benchmark's file (``consumer.evaluation.benchmarks.sets``); the rules' labels of ``--format
rules`` are ``consumer.evaluation.rule_eval``'s.

``check`` reads trace events (``trace_json``) or OpenTelemetry spans (``otlp_json``, assembled
into traces by ``otlp_file``), one JSON document or JSON lines either way. ``auto`` tells them
apart by the first JSON object: OTLP JSON has ``resourceSpans``, a trace event never does.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter, deque
from collections.abc import AsyncIterator, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import ValidationError

from consumer.cost.pricing import format_usd
from consumer.cost.verdict_tally import Tally
from consumer.errors import ConfigError, DecodeError
from consumer.evaluation.benchmarks.scores import Judged, benchmark_figures
from consumer.evaluation.benchmarks.sets import BENCHMARKS, BenchmarkSet, read_benchmark
from consumer.evaluation.calibration import Confusion, best_threshold, confusion, roc_auc
from consumer.inputs.otlp.file import read_otlp_chunks
from consumer.inputs.trace_json import decode_trace
from consumer.jsonl import numbered_lines, parse_labelled, read_text
from consumer.ops.progress import Reporter
from consumer.rules.rule_set import Skip
from consumer.settings import Settings
from consumer.telemetry.origin import TraceOrigin
from consumer.wiring import make_evaluator, make_rules, max_in_flight
from schemas.trace import Document, TraceEvent
from schemas.verdict import RULE

EXIT_OK = 0
EXIT_NOT_ALL_JUDGED = 1

# How ``check`` names each reason a trace got no verdict (or no judged one).
LEFT_OUT_LABELS: dict[Skip, str] = {
    "empty_output": "empty output", "filtered": "filtered out (TRACE_FILTER)",
    "sampled_out": "sampled out of judging (SAMPLE_RATE)"}

CheckFormat = Literal["auto", "trace_json", "otlp_json"]
_OTLP_KEYS = ("resourceSpans", "resource_spans")

T = TypeVar("T")


async def evaluate_in_order(
    evaluations: Iterable[Coroutine[Any, Any, T]], limit: int
) -> AsyncIterator[T]:
    """Run the evaluations concurrently, at most ``limit`` started ahead; yield them in input
    order. ``evaluations`` is lazy (a generator): each is created when its turn comes."""
    pending: deque[asyncio.Task[T]] = deque()
    try:
        for evaluation in evaluations:
            if len(pending) >= limit:
                yield await pending.popleft()
            pending.append(asyncio.create_task(evaluation))
        while pending:
            yield await pending.popleft()
    finally:
        for task in pending:
            task.cancel()


# -- check ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Numbered:
    """A trace and the input line it came from (its first span's, for spans)."""

    line: int
    trace: TraceEvent
    origin: TraceOrigin | None = None  # set for a trace assembled from spans


@dataclass(slots=True)
class CheckInput:
    """What ``check`` read: traces to judge, in input order, and what it reports on stderr."""

    traces: list[Numbered] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # not read: the exit code is 1
    skipped: list[str] = field(default_factory=list)  # read, empty answer: no verdict


def read_check_input(text: str, file_format: CheckFormat = "auto") -> CheckInput:
    """The file's traces in ``file_format`` (``auto``: told by its first JSON object)."""
    whole, chunks = _document_or_lines(text)
    if isinstance(whole, list):
        return CheckInput(problems=[
            "the file is one JSON array: check reads one JSON object per line, or one "
            "JSON object (a trace event, or an OTLP TracesData)"])
    if not chunks:
        return CheckInput(problems=["the file holds no trace"])
    if file_format == "auto":
        file_format = "otlp_json" if _looks_like_otlp(whole, chunks) else "trace_json"
    if file_format == "otlp_json":
        otlp = read_otlp_chunks(chunks)
        traces = [Numbered(item.line, item.candidate.trace, item.candidate.origin)
                  for item in otlp.traces]
        return CheckInput(traces, otlp.problems, otlp.skipped)
    events, problems = _decode_events(chunks)
    found = CheckInput(problems=problems)
    for item in events:
        if item.trace.has_output:
            found.traces.append(item)
        else:
            found.skipped.append(f"line {item.line}: trace {item.trace.trace_id!r} has an "
                                 "empty output: not evaluated, no verdict")
    return found


def read_traces(text: str) -> tuple[list[Numbered], list[str]]:
    """The trace events in one JSON document or in JSON lines, and a message per unusable
    line."""
    return _decode_events(_document_or_lines(text)[1])


def _document_or_lines(text: str) -> tuple[object, list[tuple[int, str]]]:
    """The text parsed whole (None when it is not one JSON value), and the chunks to decode:
    the text itself when it is one JSON object (pretty-printed over lines), else its lines."""
    try:
        whole = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        whole = None
    return whole, [(1, text)] if isinstance(whole, dict) else list(numbered_lines(text))


def _decode_events(chunks: Iterable[tuple[int, str]]) -> tuple[list[Numbered], list[str]]:
    traces: list[Numbered] = []
    problems: list[str] = []
    for number, chunk in chunks:
        try:
            traces.append(Numbered(number, decode_trace(chunk.encode("utf-8", "surrogatepass"))))
        except DecodeError as exc:
            hint = (" (OTLP JSON among trace events: the first line decides the format;"
                    " --format otlp_json reads spans)") if _is_otlp_chunk(chunk) else ""
            problems.append(f"line {number}: {exc.reason}{hint}")
    return traces, problems


def _is_otlp_chunk(chunk: str) -> bool:
    try:
        found = json.loads(chunk)
    except (ValueError, RecursionError):
        return False
    return isinstance(found, dict) and any(key in found for key in _OTLP_KEYS)


def _looks_like_otlp(whole: object, chunks: list[tuple[int, str]]) -> bool:
    """Does the first JSON object (the whole document, or the first line that is one) have
    ``resourceSpans``?"""
    if isinstance(whole, dict):
        return any(key in whole for key in _OTLP_KEYS)
    for _, chunk in chunks:
        try:
            first = json.loads(chunk)
        except (ValueError, RecursionError):
            continue
        if isinstance(first, dict):
            return any(key in first for key in _OTLP_KEYS)
    return False


async def check(settings: Settings, text: str, file_format: CheckFormat = "auto") -> int:
    """Print a verdict line per trace and rule that applies, in input order (a trace's in
    ``RULES`` order), then a summary per rule on stderr; the exit code."""
    # Refuses without an API key before reading, when RULES names groundedness.
    rules = make_rules(settings)
    found = read_check_input(text, file_format)
    for message in (*found.problems, *found.skipped):
        print(f"check: {message}", file=sys.stderr)
    tally = Tally()  # the verdicts by rule, and the judge's tokens, cache hits and cost
    left_out: Counter[Skip] = Counter({"empty_output": len(found.skipped)})
    try:
        results = evaluate_in_order(
            (rules.evaluate(item.trace, origin=item.origin) for item in found.traces),
            max_in_flight(settings),
        )
        async for found_for_trace in results:
            if found_for_trace.skipped is not None:
                left_out[found_for_trace.skipped] += 1
            for evaluation in found_for_trace.evaluations:
                tally.add(evaluation.verdict)
                print(evaluation.verdict.model_dump_json(), flush=True)
    finally:
        await rules.close()
    if found.traces:
        lines = check_summary(rules.names, tally.by_rule, len(found.traces), left_out)
        for line in (*lines, *cost_summary(rules.names, tally, left_out)):
            print(f"check: {line}", file=sys.stderr)
    return EXIT_NOT_ALL_JUDGED if tally.verdicts["error"] or found.problems else EXIT_OK


def check_summary(rules: Sequence[str], counts: Counter[tuple[str, str]], traces: int,
                  left_out: Counter[Skip] | None = None) -> list[str]:
    """A line per rule: its verdicts, and the traces (of those with an answer) it did not
    apply to; a trace ``TRACE_FILTER`` left out is no rule's, one ``SAMPLE_RATE`` left out
    not the judge's."""
    left_out = left_out or Counter()
    lines = []
    for rule in rules:
        verdicts = [counts[rule, kind] for kind in ("pass", "fail", "error")]
        line = "{}: {} pass, {} fail, {} error".format(rule, *verdicts)
        seen = traces - left_out["filtered"] - (left_out["sampled_out"] if rule == RULE else 0)
        if seen > sum(verdicts):
            line += f", not applicable to {seen - sum(verdicts)} of {seen} traces"
        lines.append(line)
    return lines


def cost_summary(rules: Sequence[str], tally: Tally, left_out: Counter[Skip]) -> list[str]:
    """What the cost controls left out, by reason (when any was), and what the judge's
    verdicts cost (with ``groundedness`` among the rules)."""
    lines = []
    reasons = [f"{left_out[reason]} {label}" for reason, label in LEFT_OUT_LABELS.items()
               if left_out[reason]]
    if reasons:
        lines.append(f"left out: {', '.join(reasons)}")
    if RULE in rules:
        cost = tally.cost
        spent = (format_usd(cost.cost_usd) if cost.cost_usd is not None
                 else "no prices set (JUDGE_PRICE_*)")
        lines.append(f"judge: {cost.verdicts} verdicts, {tally.cache_hits} from the cache, "
                     f"{cost.total_tokens:,} tokens ({cost.prompt_tokens:,} prompt + "
                     f"{cost.completion_tokens:,} completion), {spent}")
    return lines


# -- eval -------------------------------------------------------------------------------------


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
                            ungrounded, failed, scores)
    if benchmark is not None:
        report["benchmark"] = benchmark_figures(benchmark, settings.judge_model, outcomes)
    return report


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
