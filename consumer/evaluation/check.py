"""``groundedness check``: the rules of ``RULES`` on traces from a file, without Kafka.

It reads traces, evaluates them concurrently (the judge holds at most
``JUDGE_MAX_CONCURRENCY`` calls; at most ``max_in_flight`` traces are started ahead,
``in_order.py``) and takes the results in input order. Every rule of ``RULES`` runs (with
each rule's filter and sample rate, the answer cache and prices, as ``run``); it prints one
verdict JSON line per trace and rule that applies, then on stderr a summary per rule, what was
left out and why, and what the judge cost.

It reads trace events (``trace_json``), OpenTelemetry spans (``otlp_json``, assembled into
traces by ``consumer.inputs.otlp.file``), one JSON document or JSON lines either way, or
``eval``'s labelled rows (``labelled``: ``id``, ``input``, ``documents``, ``output``, ``label``,
as the bundled sample), each a trace with its label in metadata. ``auto`` tells them apart by
the first JSON object: OTLP JSON has ``resourceSpans``, a labelled row a ``label`` and no
``trace_id``; anything else is a trace event.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from consumer.cost.pricing import format_usd
from consumer.cost.verdict_tally import Tally
from consumer.errors import DecodeError
from consumer.evaluation.in_order import evaluate_in_order
from consumer.inputs.otlp.file import read_otlp_chunks
from consumer.inputs.trace_json import decode_trace
from consumer.jsonl import labelled_row, numbered_lines
from consumer.ops.progress import Reporter, interactive
from consumer.rules.rule_set import TRACE_WIDE, RuleResults, Skip
from consumer.settings import Settings
from consumer.telemetry.origin import TraceOrigin
from consumer.wiring import make_rules, max_in_flight
from schemas.trace import TraceEvent
from schemas.verdict import RULE

EXIT_OK = 0
EXIT_NOT_ALL_JUDGED = 1

# How ``check`` names each reason a trace got no verdict from a rule.
LEFT_OUT_LABELS: dict[Skip, str] = {
    "empty_output": "empty output", "no_answer_found": "no answer found in the spans",
    "filtered": "filtered out (<RULE>_FILTER or TRACE_FILTER)",
    "sampled_out": "sampled out (<RULE>_SAMPLE_RATE or SAMPLE_RATE)"}

CheckFormat = Literal["auto", "trace_json", "otlp_json", "labelled"]
PROGRESS_FROM_TRACES = 10  # fewer are done before a bar would tell anything
# An OTLP JSON document of spans, or of the log records that join them.
_OTLP_KEYS = ("resourceSpans", "resource_spans", "resourceLogs", "resource_logs")


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
    no_answer: int = 0  # of those, traces from spans whose answer was found nowhere


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
        file_format = _sniff(whole, chunks)
    if file_format == "otlp_json":
        otlp = read_otlp_chunks(chunks)
        traces = [Numbered(item.line, item.candidate.trace, item.candidate.origin)
                  for item in otlp.traces]
        return CheckInput(traces, otlp.problems, otlp.skipped, otlp.no_answer)
    events, problems = (_decode_labelled if file_format == "labelled" else _decode_events)(chunks)
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


def _decode_labelled(chunks: Iterable[tuple[int, str]]) -> tuple[list[Numbered], list[str]]:
    """``eval``'s labelled rows as trace events, the label in their metadata."""
    traces: list[Numbered] = []
    problems: list[str] = []
    for number, chunk in chunks:
        try:
            event = json.dumps(labelled_row(number, chunk).as_trace()).encode("utf-8")
            traces.append(Numbered(number, decode_trace(event)))
        except ValueError as exc:
            problems.append(f"line {number}: {exc}")
        except DecodeError as exc:
            problems.append(f"line {number}: {exc.reason}")
    return traces, problems


def _is_otlp_chunk(chunk: str) -> bool:
    try:
        found = json.loads(chunk)
    except (ValueError, RecursionError):
        return False
    return isinstance(found, dict) and any(key in found for key in _OTLP_KEYS)


def _sniff(whole: object, chunks: list[tuple[int, str]]) -> CheckFormat:
    """The format of the first JSON object (the whole document, or the first line that is
    one): ``otlp_json`` with ``resourceSpans`` (or ``resourceLogs``), ``labelled`` with a
    ``label`` and no ``trace_id``, else ``trace_json``."""
    first = whole if isinstance(whole, dict) else next(_objects(chunks), None)
    if first is None:
        return "trace_json"  # which names every line that is no trace event
    if any(key in first for key in _OTLP_KEYS):
        return "otlp_json"
    return "labelled" if "label" in first and "trace_id" not in first else "trace_json"


def _objects(chunks: Iterable[tuple[int, str]]) -> Iterator[dict[str, object]]:
    """The chunks that are JSON objects, parsed."""
    for _, chunk in chunks:
        try:
            found = json.loads(chunk)
        except (ValueError, RecursionError):
            continue
        if isinstance(found, dict):
            yield found


async def check(settings: Settings, text: str, file_format: CheckFormat = "auto") -> int:
    """Print a verdict line per trace and rule that applies, in input order (a trace's in
    ``RULES`` order), then a summary per rule on stderr; the exit code."""
    # Refuses without an API key before reading, when RULES names groundedness.
    rules = make_rules(settings)
    found = read_check_input(text, file_format)
    for message in (*found.problems, *found.skipped):
        print(f"check: {message}", file=sys.stderr)
    tally = Tally()  # the verdicts by rule, and the judge's tokens, cache hits and cost
    left_out = LeftOut(Counter({"empty_output": len(found.skipped) - found.no_answer,
                                "no_answer_found": found.no_answer}))
    # A bar on a terminal only: stderr without one ends with the summary, nothing else.
    bar = len(found.traces) >= PROGRESS_FROM_TRACES and interactive()
    try:
        with Reporter("check", len(found.traces), bar=bar, log_lines=False) as progress:
            results = evaluate_in_order(
                (rules.evaluate(item.trace, origin=item.origin) for item in found.traces),
                max_in_flight(settings),
            )
            async for found_for_trace in results:
                progress.advance()
                left_out.add(found_for_trace)
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


@dataclass(frozen=True, slots=True)
class LeftOut:
    """What got no verdict: traces without an answer (no rule's), and each rule's choice."""

    traces: Counter[Skip] = field(default_factory=Counter)  # a ``TRACE_WIDE`` reason
    by_rule: Counter[tuple[str, Skip]] = field(default_factory=Counter)  # filtered, sampled

    def add(self, results: RuleResults) -> None:
        """Count one trace's skips."""
        reasons = set(results.skipped.values())
        if reasons & TRACE_WIDE:
            self.traces.update(reasons)
        else:
            self.by_rule.update(results.skipped.items())


def check_summary(rules: Sequence[str], counts: Counter[tuple[str, str]], traces: int,
                  left_out: LeftOut | None = None) -> list[str]:
    """A line per rule: its verdicts, and the traces (of those with an answer, and that it
    selected) it did not apply to."""
    left_out = left_out or LeftOut()
    lines = []
    for rule in rules:
        verdicts = [counts[rule, kind] for kind in ("pass", "fail", "error")]
        line = "{}: {} pass, {} fail, {} error".format(rule, *verdicts)
        seen = traces - left_out.by_rule[rule, "filtered"] - left_out.by_rule[rule, "sampled_out"]
        if seen > sum(verdicts):
            line += f", not applicable to {seen - sum(verdicts)} of {seen} traces"
        lines.append(line)
    return lines


def cost_summary(rules: Sequence[str], tally: Tally, left_out: LeftOut) -> list[str]:
    """What was left out, by reason (when any was): the traces without an answer, then each
    rule's; and what the judge's verdicts cost (with ``groundedness`` among the rules)."""
    lines = []
    reasons = [f"{left_out.traces[reason]} {label}" for reason, label in LEFT_OUT_LABELS.items()
               if left_out.traces[reason]]
    if reasons:
        lines.append(f"left out: {', '.join(reasons)}")
    for rule in rules:
        chosen = [f"{left_out.by_rule[rule, reason]} {label}"
                  for reason, label in LEFT_OUT_LABELS.items() if left_out.by_rule[rule, reason]]
        if chosen:
            lines.append(f"left out of {rule}: {', '.join(chosen)}")
    if RULE in rules:
        cost = tally.cost
        spent = (format_usd(cost.cost_usd) if cost.cost_usd is not None
                 else "no prices set (JUDGE_PRICE_*)")
        lines.append(f"judge: {cost.verdicts} verdicts, {tally.cache_hits} from the cache, "
                     f"{cost.total_tokens:,} tokens ({cost.prompt_tokens:,} prompt + "
                     f"{cost.completion_tokens:,} completion), {spent}")
    return lines


