"""A verdict sink that acknowledges or refuses, and an emitter that keeps what it was given:
for the verdict events' unit tests."""

from __future__ import annotations

from consumer.errors import PublishError
from consumer.pipeline.delivery.sink import Record
from schemas.verdict import VerdictEvent


class Sink:
    """A verdict sink whose broker acknowledges, or refuses, each publish."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.published: list[VerdictEvent] = []
        self.dead_letters = 0

    async def publish(self, verdict: VerdictEvent) -> None:
        if self.refuse:
            raise PublishError("verdict not acknowledged: KafkaTimeoutError")
        self.published.append(verdict)

    async def dead_letter(self, record: Record, reason: str) -> None:
        self.dead_letters += 1


class Emitted:
    def __init__(self) -> None:
        self.verdicts: list[VerdictEvent] = []

    def emit(self, verdict: VerdictEvent) -> None:
        self.verdicts.append(verdict)
