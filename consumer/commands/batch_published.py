"""What a batch replay published, kept beside its state file, so that running the same command
again after a stop or a crash publishes nothing twice; and the Batch API's price on the
verdicts the batch answered.

``PublishedLedger`` is an append-only file (``<state>.published``): one line per outcome the
broker acknowledged, a verdict's id or ``dead-letter <topic> <partition> <offset>``, flushed
line by line and read back at start. ``PublishOnce`` is the replay's sink in front of the
real one: an outcome in the ledger is not sent again (``already_published`` counts it); any
other is sent, and recorded once acknowledged. A process killed (SIGKILL) between the
broker's acknowledgement and the line's write sends that one outcome again on the next run,
under the same verdict id and key, so a compacted topic still keeps one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from schemas.verdict import VerdictEvent

if TYPE_CHECKING:  # types only; keeps aiokafka out of `groundedness --help`
    from consumer.stream.sink import Record, VerdictSink

# OpenAI bills Batch API requests at 50% of the synchronous price ("50% lower costs", the
# Batch API guide and the pricing page's Batch column), so a verdict answered by a batch
# costs half of JUDGE_PRICE_*; a request sent synchronously costs the full price.
BATCH_PRICE_FACTOR = 0.5


def ledger_path(state_path: Path) -> Path:
    """The ledger beside a state file: ``<state>.published``."""
    return state_path.with_name(state_path.name + ".published")


def dead_letter_key(record: Record) -> str:
    """A dead letter's line in the ledger: where its record was read (a verdict id is a UUID,
    so the two never meet)."""
    return f"dead-letter {record.topic} {record.partition} {record.offset}"


class PublishedLedger:
    """The outcomes published by this replay's runs, read at start, appended as acknowledged;
    a context manager that closes the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = ""
        lines = text.split("\n")
        # A last line without its newline was cut by a crash mid-write: not recorded.
        self._published = {line for line in lines[:-1] if line}
        self.loaded = len(self._published)  # published by earlier runs
        self._file = path.open("a", encoding="utf-8")
        if lines[-1]:
            self._file.write("\n")  # the cut line ends here, and the next starts whole
            self._file.flush()

    def __contains__(self, key: object) -> bool:
        return key in self._published

    def __len__(self) -> int:
        return len(self._published)

    def record(self, key: str) -> None:
        """``key`` was published: one line, flushed before this returns."""
        self._published.add(key)
        self._file.write(key + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    def __enter__(self) -> PublishedLedger:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class PublishOnce:
    """A ``VerdictSink`` that sends what ``ledger`` does not hold, and records it once
    acknowledged; a verdict ``batch_priced`` names has its cost at the batch price."""

    def __init__(
        self, sink: VerdictSink, ledger: PublishedLedger,
        batch_priced: Callable[[VerdictEvent], bool] = lambda _: False,
    ) -> None:
        self._sink = sink
        self._ledger = ledger
        self._batch_priced = batch_priced
        self.already_published = 0  # outcomes left out: published by an earlier run

    async def publish(self, verdict: VerdictEvent) -> None:
        """Publish unless published already; then record it."""
        if verdict.verdict_id in self._ledger:
            self.already_published += 1
            return
        if verdict.cost_usd and self._batch_priced(verdict):
            verdict = verdict.model_copy(update={"cost_usd": verdict.cost_usd
                                                 * BATCH_PRICE_FACTOR})
        await self._sink.publish(verdict)
        self._ledger.record(verdict.verdict_id)

    async def dead_letter(self, record: Record, reason: str) -> None:
        """Dead-letter unless done already; then record it."""
        key = dead_letter_key(record)
        if key in self._ledger:
            self.already_published += 1
            return
        await self._sink.dead_letter(record, reason)
        self._ledger.record(key)
