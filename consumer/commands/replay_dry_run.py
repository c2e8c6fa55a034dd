"""What a replay's ``--dry-run`` counts, and the stand-ins that let a span topic's dry run go
through the replay's own pipeline.

A trace event topic's dry run classifies each record as ``record_path.py`` would (``DryRun.add``).
A span topic's runs the very ``Pipeline`` and ``SpanPath`` the replay runs, so the same records
close the same traces at the same moments, early ones included; only a closed trace's way
differs: ``TraceCounter`` takes the place of ``trace_path.py``'s, classifying it as that would
(no candidate, empty answer, or judged) and building the judge's request for its token
estimate, never calling the judge. The pipeline's evaluator holds a judge that must never be
called (``UncalledJudge``), and its sink (``NullSink``) sends nothing: a record that would be
dead-lettered is counted by the pipeline as usual.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from consumer.errors import DecodeError
from consumer.judge.prompt import JudgeRequest, Limits, build_request
from consumer.stream.decode import decode_trace
from consumer.telemetry.assembly import ClosedTrace
from consumer.telemetry.candidate import candidate

if TYPE_CHECKING:  # types only
    from consumer.judge.result import JudgeResult
    from consumer.stream.partitions import Partition
    from consumer.stream.sink import Record
    from schemas.verdict import VerdictEvent


@dataclass(slots=True)
class DryRun:
    """What a replay would do, read without judging or publishing."""

    would_judge: int = 0
    skipped: int = 0
    dead_lettered: int = 0
    estimated_tokens: int = 0

    def add(self, record: Record, limits: Limits) -> None:
        """Classify one trace event record as the pipeline would."""
        try:
            trace = decode_trace(record.value)
        except DecodeError:
            self.dead_lettered += 1
            return
        if not trace.has_output:
            self.skipped += 1
            return
        self.count_request(build_request(trace, limits))

    def count_request(self, request: JudgeRequest) -> None:
        """One trace the judge would be asked about, and its estimated tokens."""
        self.would_judge += 1
        self.estimated_tokens += request.estimated_tokens


class TraceCounter:
    """A span topic's dry run: each closed trace counted as ``TracePath`` would take it
    (``stream/span_path.ClosedTraces``), its request built for the estimate, nothing judged."""

    def __init__(self, limits: Limits) -> None:
        self.dry = DryRun()
        self.no_candidate = 0
        self._limits = limits

    async def handle(self, tp: Partition, closed: ClosedTrace, bound: Any) -> None:
        """Count the trace; never raises (a bug is logged: the live worker's error verdict)."""
        try:
            found = candidate(closed)
            if found == "no_candidate":
                self.no_candidate += 1
            elif found == "empty_answer":
                self.dry.skipped += 1
            else:
                self.dry.count_request(build_request(found.trace, self._limits))
        except Exception:  # the replay would publish an error verdict for it
            bound.exception("trace_failed")


class UncalledJudge:
    """The judge of a dry run's pipeline: never holding, never to be called."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.holding = False

    async def judge(self, request: JudgeRequest) -> JudgeResult:
        """Refuse: a dry run calls no judge."""
        raise RuntimeError("a dry run calls no judge")

    async def close(self) -> None:
        """Nothing to release."""


class NullSink:
    """The sink of a dry run's pipeline: sends nothing (the pipeline still counts)."""

    async def publish(self, verdict: VerdictEvent) -> None:
        """Send nothing."""

    async def dead_letter(self, record: Record, reason: str) -> None:
        """Send nothing."""
