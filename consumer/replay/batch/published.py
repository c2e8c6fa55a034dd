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

import hashlib
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from schemas.verdict import Usage, VerdictEvent

if TYPE_CHECKING:  # types only; keeps aiokafka out of `groundedness --help`
    from consumer.pipeline.delivery.sink import Record, VerdictSink

# OpenAI bills Batch API requests at 50% of the synchronous price ("50% lower costs", the
# Batch API guide and the pricing page's Batch column), so a verdict answered by a batch
# costs half of JUDGE_PRICE_*; a request sent synchronously costs the full price.
BATCH_PRICE_FACTOR = 0.5


def ledger_path(state_path: Path, verdicts_topic: str, bootstrap: str) -> Path:
    """The ledger beside a state file, one per place verdicts go: ``<state>.<digest>.published``
    (the digest of the cluster and ``VERDICTS_TOPIC``), so a replay into another topic or
    cluster publishes every verdict there, rather than taking them for published."""
    where = hashlib.sha256(f"{bootstrap}\x1f{verdicts_topic}".encode()).hexdigest()[:12]
    return state_path.with_name(f"{state_path.name}.{where}.published")


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


def as_billed(verdict: VerdictEvent, *, by_batch: bool, first: bool) -> VerdictEvent:
    """A verdict as its request was billed. Judged synchronously (``by_batch`` False): as the
    judge billed it. Answered by the batch, which sent each distinct request once: the
    ``first`` verdict of the request carries its tokens at ``BATCH_PRICE_FACTOR`` of the
    price; the others reused the answer (``cached``, no tokens, no cost)."""
    if not by_batch:
        return verdict
    if not first:
        free = None if verdict.cost_usd is None else 0.0
        return verdict.model_copy(update={"cached": True, "usage": Usage(), "cost_usd": free})
    if verdict.cost_usd is None:
        return verdict
    return verdict.model_copy(update={"cost_usd": verdict.cost_usd * BATCH_PRICE_FACTOR})


class PublishOnce:
    """A ``VerdictSink`` that sends what ``ledger`` does not hold, as ``settle`` bills it, and
    records it once acknowledged."""

    def __init__(
        self, sink: VerdictSink, ledger: PublishedLedger,
        settle: Callable[[VerdictEvent], VerdictEvent] = lambda verdict: verdict,
    ) -> None:
        self._sink = sink
        self._ledger = ledger
        self._settle = settle
        self._this_run: set[str] = set()
        self.already_published = 0  # outcomes left out: published by an earlier run
        self.repeated = 0  # outcomes left out: a record repeated in the window, sent once

    async def publish(self, verdict: VerdictEvent) -> None:
        """Publish unless published already; then record it."""
        if self._skip(verdict.verdict_id):
            return
        await self._sink.publish(self._settle(verdict))
        self._record(verdict.verdict_id)

    async def dead_letter(self, record: Record, reason: str) -> None:
        """Dead-letter unless done already; then record it."""
        key = dead_letter_key(record)
        if self._skip(key):
            return
        await self._sink.dead_letter(record, reason)
        self._record(key)

    def _skip(self, key: str) -> bool:
        if key not in self._ledger:
            return False
        if key in self._this_run:
            self.repeated += 1
        else:
            self.already_published += 1
        return True

    def _record(self, key: str) -> None:
        self._ledger.record(key)
        self._this_run.add(key)
