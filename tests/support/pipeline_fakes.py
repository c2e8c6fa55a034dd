"""In-memory stand-ins for the judge and the sink around ``Pipeline``, for unit tests.

``GatedJudge`` answers a trace only once the test opens its gate; ``ListSink`` keeps what the
pipeline published and dead-lettered (or, built with ``allow_dead_letters=False``, fails the
test on a dead letter); ``Commits`` keeps what it committed.
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

from consumer.judge.prompt import JudgeRequest, read_data
from consumer.judge.result import Answered, JudgeResult
from consumer.pipeline.delivery.sink import Record
from consumer.pipeline.progress import Commitment, Progress, decode
from schemas.judge import JudgeAnswer
from schemas.verdict import VerdictEvent


class TP(NamedTuple):
    """Stands in for aiokafka's TopicPartition (hashable, with .topic and .partition)."""

    topic: str
    partition: int


class Rec(NamedTuple):
    """A consumed record, as the pipeline reads it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


class GatedJudge:
    """Scores 5 once the gate of the answer it is asked about is open; ``holding`` is set by
    the test (the judge down for everyone)."""

    model = "gated-judge"

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.started: list[str] = []  # the answers judged so far, gate open or not
        self.holding = False

    def gate(self, answer: str) -> asyncio.Event:
        """The gate of ``answer`` (created closed on first use)."""
        return self.gates.setdefault(answer, asyncio.Event())

    def open(self, *answers: str) -> None:
        """Open the gates of ``answers``."""
        for answer in answers:
            self.gate(answer).set()

    async def judge(self, request: JudgeRequest) -> JudgeResult:
        """Wait for the answer's gate, then score 5."""
        answer = str(read_data(request.messages)["answer"])
        self.started.append(answer)
        await self.gate(answer).wait()
        return Answered(JudgeAnswer(score=5, reason="ok"), None, 1, 1)

    async def close(self) -> None:
        """Nothing to release."""
        return None


class ListSink:
    """Keeps the published verdicts and the dead letters, in order."""

    def __init__(self, *, allow_dead_letters: bool = True) -> None:
        self.verdicts: list[VerdictEvent] = []
        self.dead: list[tuple[int, str]] = []  # (offset, reason)
        self._allow_dead_letters = allow_dead_letters

    @property
    def published(self) -> list[str]:
        """The trace ids of the published verdicts, in order."""
        return [verdict.trace_id for verdict in self.verdicts]

    async def publish(self, verdict: VerdictEvent) -> None:
        """Keep ``verdict``."""
        self.verdicts.append(verdict)

    async def dead_letter(self, record: Record, reason: str) -> None:
        """Keep ``(offset, reason)``; fail the test if dead letters are not allowed."""
        if not self._allow_dead_letters:
            raise AssertionError(f"unexpected dead letter: {reason}")
        self.dead.append((record.offset, reason))


class Commits(list[dict[Any, int]]):
    """The pipeline's commit callable that commits nothing: each commit kept as
    ``{partition: offset}``, and each partition's last progress decoded (``progress``)."""

    def __init__(self) -> None:
        super().__init__()
        self.progress: dict[Any, Progress] = {}

    async def __call__(self, offsets: dict[Any, Commitment]) -> dict[Any, Commitment]:
        """Record the commit; all of it succeeds."""
        self.append({tp: commitment.offset for tp, commitment in offsets.items()})
        for tp, commitment in offsets.items():
            self.progress[tp] = decode(commitment.metadata, commitment.offset)
        return offsets
