"""The fleet's judge spend today, read from ``VERDICTS_TOPIC`` for ``JUDGE_BUDGET_USD_PER_DAY``.

Every replica already publishes each verdict with its ``cost_usd``, so the results topic is
the fleet's ledger: this reader follows it outside any group (partitions assigned by hand,
nothing committed), from each partition's first offset at or after midnight UTC
(``offsets_for_times``), and tells the budget (``cost/daily_budget.py``) every cost it reads,
its own replica's included: that is how its own calls stop being counted apart. It reads
uncommitted records too: a transaction left open by a killed replica would otherwise hide
everyone's later spend until it times out, and an aborted verdict's call was paid for.

``catch_up`` reads up to the end offsets as of its start before the worker judges anything,
so a replica restarted after the cap was reached does not start spending again. Partitions
are looked for again every ``PARTITIONS_EVERY_S``, and every ``MISSING_EVERY_S`` while the topic
does not exist yet (a fresh deployment: the first verdicts create it, and each replica must
see the others' at once); partitions already read keep their positions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import structlog

from consumer.cost.daily_budget import DailyBudget
from consumer.kafka import compat as aiokafka_compat
from consumer.kafka.partitions import Partition
from consumer.kafka.types import AIOKafkaConsumer, KafkaError, TopicPartition

log = structlog.get_logger(__name__)

FETCH_WAIT_MS = 500
FETCH_MAX_RECORDS = 5_000
PARTITIONS_EVERY_S = 30.0
MISSING_EVERY_S = 0.5
# A cost no judge call has: another producer's junk, which would stop the fleet for the day.
MAX_CALL_USD = 100.0
RETRY_S = 5.0
PROGRESS_EVERY_S = 10.0  # a long day's catching up is said this often


class FleetSpend:
    """Reads the day's verdicts into ``budget``; ``catch_up`` first, then ``follow``."""

    def __init__(self, reader: AIOKafkaConsumer, topic: str, budget: DailyBudget) -> None:
        self.reader = reader  # started by the worker, as its other clients
        self._topic = topic
        self._budget = budget
        self._assigned: set[Partition] = set()
        self._looked_at = 0.0
        self.records = 0  # verdict records read

    async def catch_up(self, stop: asyncio.Event) -> bool:
        """Read the day so far (to the end offsets as of now), saying how far every
        ``PROGRESS_EVERY_S``; False if stopped first. A broker error is retried."""
        started = said = time.monotonic()
        while not stop.is_set():
            try:
                await self._assign_new()
                ends = await self.reader.end_offsets(list(self._assigned))
                while not stop.is_set():
                    if await self._reached(ends):
                        log.info("judge_budget_read", cap_usd=self._budget.cap_usd,
                                 spent_today_usd=round(self._budget.spent_usd, 6),
                                 records=self.records, partitions=len(self._assigned),
                                 seconds=round(time.monotonic() - started, 3))
                        return True
                    await self._read_once()
                    if time.monotonic() - said >= PROGRESS_EVERY_S:
                        said = time.monotonic()
                        log.info("judge_budget_reading", records=self.records,
                                 spent_today_usd=round(self._budget.spent_usd, 6))
            except KafkaError as exc:
                await self._wait_after(exc, stop)
        return False

    async def follow(self, stop: asyncio.Event) -> None:
        """Read on until ``stop``; a broker error is retried, never fatal (the budget then
        counts this replica's own calls alone until the reading resumes)."""
        while not stop.is_set():
            try:
                every = PARTITIONS_EVERY_S if self._assigned else MISSING_EVERY_S
                if time.monotonic() - self._looked_at >= every:
                    await self._assign_new()
                await self._read_once()
                self._budget.refresh()  # the gauge moves at midnight even with no traffic
            except KafkaError as exc:
                await self._wait_after(exc, stop)

    @staticmethod
    async def _wait_after(exc: KafkaError, stop: asyncio.Event) -> None:
        log.warning("judge_budget_read_failed", error=type(exc).__name__, retry_in_s=RETRY_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), RETRY_S)

    async def _reached(self, ends: dict[Partition, int]) -> bool:
        for tp, end in ends.items():
            if await self.reader.position(tp) < end:
                return False
        return True

    async def close(self) -> None:
        """Stop the reader (nothing to commit: it is in no group)."""
        with contextlib.suppress(KafkaError):
            await self.reader.stop()

    async def _read_once(self) -> None:
        if not self._assigned:
            await asyncio.sleep(FETCH_WAIT_MS / 1000)
            return
        batch = await self.reader.getmany(timeout_ms=FETCH_WAIT_MS,
                                           max_records=FETCH_MAX_RECORDS)
        for records in batch.values():
            for record in records:
                self.records += 1
                self.count(record.value, record.timestamp)

    def count(self, value: bytes | None, timestamp_ms: int) -> None:
        """One record of the results topic: its cost, if it is a verdict's."""
        # Most verdicts of a fleet with deterministic rules carry no cost: not parsed at all.
        if not value or b'"cost_usd"' not in value:
            return
        try:
            verdict = json.loads(value)
            cost, charged = verdict["cost_usd"], verdict["verdict_id"]
        except (ValueError, TypeError, KeyError, RecursionError):
            return  # not a verdict of ours: another producer's record costs nothing here
        # A number a call can cost: not a string, a boolean, NaN, infinite, negative or huge.
        if (isinstance(cost, int | float) and not isinstance(cost, bool)
                and isinstance(charged, str) and 0 <= cost <= MAX_CALL_USD):
            self._budget.seen(charged, float(cost), timestamp_ms)

    async def _assign_new(self) -> None:
        """Assign the topic's partitions not yet read, each from the day's first offset."""
        self._looked_at = time.monotonic()
        # Asked of the whole cluster first: a request naming a missing topic could create it.
        if self._topic not in await self.reader.topics():
            return  # no verdict yet: nothing spent
        await aiokafka_compat.load_topic(self.reader, self._topic)
        if self._assigned:  # a known topic's metadata is refreshed only every few minutes
            await aiokafka_compat.refresh_metadata(self.reader)
        numbers = self.reader.partitions_for_topic(self._topic) or set()
        new = [TopicPartition(self._topic, n) for n in sorted(numbers)
               if TopicPartition(self._topic, n) not in self._assigned]
        if not new:
            return
        # assign() replaces the assignment: the partitions read so far would start over.
        positions = {tp: await self.reader.position(tp) for tp in self._assigned}
        self._assigned.update(new)
        self.reader.assign(list(self._assigned))
        for tp, offset in positions.items():
            self.reader.seek(tp, offset)
        starts = await self.reader.offsets_for_times(
            dict.fromkeys(new, self._budget.day_start_ms()))
        ends = await self.reader.end_offsets(new)
        for tp in new:
            found = starts.get(tp)
            self.reader.seek(tp, found.offset if found is not None else ends[tp])
