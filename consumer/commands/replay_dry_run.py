"""What a replay's ``--dry-run`` counts, and the stand-ins that let a span topic's dry run go
through the replay's own pipeline.

A trace with an answer is counted per rule of ``RULES`` as the replay would take it: the
deterministic rules are run for real (free and pure: their pass and fail counts are the
replay's), while ``groundedness`` only has the judge's request built for its token estimate,
never sent (``would_judge``). A trace no rule applies to counts ``not_applicable``.

A trace event topic's dry run classifies each record as ``record_path.py`` would (``DryRun.add``).
A span topic's runs the very ``Pipeline`` and ``SpanPath`` the replay runs, so the same records
close the same traces at the same moments, early ones included; only a closed trace's way
differs: ``TraceCounter`` takes the place of ``trace_path.py``'s, classifying it as that would
(no candidate, empty answer, or counted per rule). The pipeline's rules never call a judge (the
deterministic rules, or a groundedness whose judge refuses to be called: ``UncalledJudge``), and
its sink (``NullSink``) sends nothing: a record that would be dead-lettered is counted by the
pipeline as usual.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from consumer.errors import DecodeError
from consumer.judge.prompt import JudgeRequest, Limits, build_request
from consumer.rules.rule_set import RuleSet
from consumer.stream.decode import decode_trace
from consumer.telemetry.assembly import ClosedTrace
from consumer.telemetry.candidate import candidate
from consumer.verdicts import TraceOrigin
from schemas.trace import TraceEvent

if TYPE_CHECKING:  # types only
    from consumer.judge.result import JudgeResult
    from consumer.stream.partitions import Partition
    from consumer.stream.sink import Record
    from schemas.verdict import VerdictEvent


class DryRun:
    """What a replay would do, read without judging or publishing.

    ``checks``: the deterministic rules of ``RULES`` (None when it names none); ``judging``:
    ``RULES`` names ``groundedness``, so each trace with an answer would be judged."""

    def __init__(self, limits: Limits, checks: RuleSet | None = None,
                 judging: bool = True) -> None:
        self.would_judge = 0  # traces the judge would be asked about
        self.skipped = 0
        self.dead_lettered = 0
        self.not_applicable = 0  # traces with an answer no rule applies to
        self.estimated_tokens = 0
        self.by_rule: Counter[tuple[str, str]] = Counter()  # deterministic (rule, verdict)
        self._limits = limits
        self._checks = checks
        self._judging = judging

    async def add(self, record: Record) -> None:
        """Classify one trace event record as the pipeline would."""
        try:
            trace = decode_trace(record.value)
        except DecodeError:
            self.dead_lettered += 1
            return
        if not trace.has_output:
            self.skipped += 1
            return
        await self.count_trace(trace)

    async def count_trace(self, trace: TraceEvent, origin: TraceOrigin | None = None) -> None:
        """A trace with an answer: the deterministic rules' verdicts, the judge's request."""
        # No source: nothing is published, and the verdicts are only counted.
        checked = (await self._checks.evaluate(trace, None, origin)).evaluations \
            if self._checks else []
        for evaluation in checked:
            self.by_rule[evaluation.verdict.rule, evaluation.verdict.verdict] += 1
        if self._judging:  # groundedness applies to every trace with an answer
            self.count_request(build_request(trace, self._limits))
        elif not checked:
            self.not_applicable += 1

    def count_request(self, request: JudgeRequest) -> None:
        """One trace the judge would be asked about, and its estimated tokens."""
        self.would_judge += 1
        self.estimated_tokens += request.estimated_tokens


class TraceCounter:
    """A span topic's dry run: each closed trace counted as ``TracePath`` would take it
    (``stream/span_path.ClosedTraces``), per rule, nothing judged."""

    def __init__(self, limits: Limits, checks: RuleSet | None = None,
                 judging: bool = True) -> None:
        self.dry = DryRun(limits, checks, judging)
        self.no_candidate = 0

    async def handle(self, tp: Partition, closed: ClosedTrace, bound: Any) -> None:
        """Count the trace; never raises (a bug is logged: the live worker's error verdict)."""
        try:
            found = candidate(closed)
            if found == "no_candidate":
                self.no_candidate += 1
            elif found == "empty_answer":
                self.dry.skipped += 1
            else:
                await self.dry.count_trace(found.trace, found.origin)
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
