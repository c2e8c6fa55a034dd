"""``check`` on OTLP JSON: a file's spans -> its traces to judge, and what it could not read.

The input is one OTLP JSON document (pretty-printed is fine: an export saved by hand, what
``curl`` got back) or one ``TracesData`` / ``ExportTraceServiceRequest`` per line (what the
collector's file exporter writes); the caller has cut it into numbered chunks. A chunk may
instead be a ``LogsData`` (the collector's logs pipeline, written to the same file or
appended to it): its GenAI log records join their traces, as ``OTLP_LOGS_TOPIC``'s do in the
worker. Each chunk is
decoded as the worker decodes a record (``decode_otlp``), its spans assembled into traces as one
partition's are (``TraceAssembly``, each line an offset), and each trace read for the judge as
the worker reads it (``candidate``): the same spans kept, the same answer, context and verdict
fields.

The whole file is read before any trace closes, so a trace is complete: one whose root span
is in the file closes ``quiet``, one without it ``max_wait``, as the worker would close them
once their spans stopped coming.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from consumer.errors import DecodeError
from consumer.inputs.otlp.decode import decode_otlp
from consumer.inputs.otlp.logs import decode_otlp_logs
from consumer.telemetry.assembly import AssemblyLimits, ClosedTrace, TraceAssembly
from consumer.telemetry.record_refs import LOGS_LANE, SPANS, offset_of, record_ref
from consumer.telemetry.spans import DecodedRecord
from consumer.telemetry.trace_event import Candidate, candidate
from consumer.telemetry.unanswered import names_seen


@dataclass(frozen=True, slots=True)
class FileCandidate:
    """A trace to judge and the line of its first GenAI span."""

    line: int
    candidate: Candidate


@dataclass(slots=True)
class OtlpFile:
    """What an OTLP JSON file holds for ``check``."""

    traces: list[FileCandidate] = field(default_factory=list)  # in order of first GenAI span
    problems: list[str] = field(default_factory=list)  # lines or spans not read; no GenAI trace
    skipped: list[str] = field(default_factory=list)  # candidates with an empty answer
    no_answer: int = 0  # of those, candidates whose answer was found nowhere


def read_otlp_chunks(chunks: Iterable[tuple[int, str]]) -> OtlpFile:
    """Decode, assemble and read every chunk's spans (see the module docstring)."""
    limits = AssemblyLimits()
    assembly = TraceAssembly(limits)
    found = OtlpFile()
    first_seen: dict[str, int] = {}  # trace id -> order of its first kept span in the file
    lines_read = 0
    for line, chunk in chunks:
        lane = LOGS_LANE if _is_logs(chunk) else SPANS
        try:
            decoded = _decode(chunk.encode("utf-8", "surrogatepass"), lane)
        except DecodeError as exc:
            found.problems.append(f"line {line}: {exc.reason}")
            continue
        lines_read += 1
        if decoded.invalid:
            what = "log record(s)" if lane == LOGS_LANE else "span(s)"
            found.problems.append(
                f"line {line}: {decoded.invalid} unreadable {what} left out: {decoded.problem}")
        elif decoded.problem is not None:
            found.problems.append(f"line {line}: {decoded.problem}")
        for trace_id in [*(s.trace_id for s in decoded.kept), *(r.trace_id for r in decoded.logs)]:
            first_seen.setdefault(trace_id, len(first_seen))
        assembly.add(record_ref(line, lane), decoded, now=0.0)
    # Every span is in (all at time 0): close the traces whose root arrived when quiet (the
    # defaults' quiet time comes first), then the rest at their max wait.
    closed = assembly.due(limits.quiet_s) + assembly.due(limits.max_wait_s)
    closed.sort(key=lambda trace: first_seen[trace.trace_id])
    for trace in closed:
        _read_trace(trace, found)
    if lines_read and not found.traces and not found.skipped:
        found.problems.append(_nothing_to_judge(closed, assembly.counts.spans_dropped))
    return found


def _is_logs(chunk: str) -> bool:
    """A ``LogsData`` document, not a ``TracesData`` (which never names resourceLogs)."""
    return ('"resourceLogs"' in chunk or '"resource_logs"' in chunk) and not (
        '"resourceSpans"' in chunk or '"resource_spans"' in chunk)


def _decode(value: bytes, lane: int) -> DecodedRecord:
    return decode_otlp_logs(value, "otlp_json") if lane == LOGS_LANE else decode_otlp(
        value, "otlp_json")


def _read_trace(closed: ClosedTrace, found: OtlpFile) -> None:
    line = offset_of(closed.first_offset)
    where = f"line {line}: trace {closed.trace_id!r}"
    try:
        result = candidate(closed)
    except Exception as exc:  # a bug on one trace must not cost the file: say so, go on
        detail = f"{type(exc).__name__}: {exc}".splitlines()[0]
        found.problems.append(f"{where} could not be read: {detail}")
        return
    if result == "empty_answer":
        found.skipped.append(f"{where} has an empty answer: not evaluated, no verdict")
    elif result == "no_answer_found":
        seen = names_seen(closed.spans)
        names = ", ".join([*seen.attributes, *(f"event {name}" for name in seen.events)])
        more = f" and {seen.left_out} more" if seen.left_out else ""
        found.skipped.append(f"{where}: no answer found on its LLM spans or their log records "
                             f"(they carry {names or 'nothing'}{more}): not evaluated, no verdict")
        found.no_answer += 1
    elif result != "no_candidate":
        found.traces.append(FileCandidate(line, result))


def _nothing_to_judge(closed: list[ClosedTrace], spans_dropped: int) -> str:
    if not closed:  # the words say what ``keep.GENAI_KEY_PREFIXES`` holds
        return (f"no GenAI trace to judge: none of the {spans_dropped} spans read has an "
                "OpenInference span kind, a traceloop span kind, or a gen_ai.* or langfuse.* "
                "attribute or event")
    return (f"no GenAI trace to judge: {len(closed)} trace(s) of GenAI spans, none with an LLM "
            "call or an answer with retrieved documents (indexing work, embeddings)")
