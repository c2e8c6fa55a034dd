"""The replay window: per-partition ``[start, stop)`` offsets, the commit callable that only
notes watermarks, and the consumer adapter that hands on only the window's records."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pytest

from consumer.pipeline.progress import Commitment
from consumer.replay.window import Window, WindowConsumer

P0, P1 = ("traces", 0), ("traces", 1)


class Rec(NamedTuple):
    """A fetched record: the window reads only its offset."""

    offset: int


@dataclass
class FakeReader:
    """A group-less consumer: queued batches, a fetch position per partition, pauses."""

    positions: dict[Any, int]
    queued: list[dict[Any, list[Rec]]] = field(default_factory=list)
    paused: set[Any] = field(default_factory=set)
    seeks: list[tuple[Any, int]] = field(default_factory=list)

    async def getmany(self, *partitions: Any, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[Any, list[Any]]:
        return self.queued.pop(0) if self.queued else {}

    async def position(self, partition: Any) -> int:
        return self.positions[partition]

    def assignment(self) -> set[Any]:
        return set(self.positions)

    def pause(self, *partitions: Any) -> None:
        self.paused.update(partitions)

    def resume(self, *partitions: Any) -> None:
        self.paused.difference_update(partitions)

    def seek(self, partition: Any, offset: int) -> None:
        self.seeks.append((partition, offset))
        self.positions[partition] = offset


def window(spans: dict[Any, tuple[int, int]]) -> Window:
    return Window(spans, asyncio.Event())


# -- Window ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("span", "total"),
    [
        pytest.param((5, 5), 0, id="empty"),
        pytest.param((7, 3), 0, id="stop-before-start"),
        pytest.param((0, 0), 0, id="empty-topic"),
    ],
)
async def test_a_window_with_nothing_in_it_is_complete_at_once(
    span: tuple[int, int], total: int
) -> None:
    w = window({P0: span})
    assert w.total == total
    assert w.completed == 0
    assert w.complete
    assert w.reading() == []
    assert w.stop_of(P0) == max(span)


async def test_totals_and_starts_per_partition() -> None:
    w = window({P0: (10, 20), P1: (0, 5)})
    assert w.total == 15
    assert w.starts() == {P0: 10, P1: 0}
    assert w.stop_of(P0) == 20
    assert sorted(w.reading()) == [P0, P1]
    assert not w.complete


async def test_commit_notes_watermarks_never_backwards_and_reports_progress() -> None:
    w = window({P0: (10, 20)})
    progress: list[int] = []
    w.on_progress = progress.append

    assert await w.commit({P0: Commitment(14, "")}) == {P0: Commitment(14, "")}
    # an older watermark changes nothing
    assert await w.commit({P0: Commitment(12, "")}) == {P0: Commitment(12, "")}
    assert w.completed == 4
    assert progress == [4, 4]
    assert not w.stop.is_set()


async def test_completed_counts_no_offset_past_the_stop() -> None:
    w = window({P0: (10, 20)})
    # a watermark past the stop: records beyond were put back
    await w.commit({P0: Commitment(25, "")})
    assert w.completed == 10


async def test_the_stop_is_set_only_once_reached_and_every_fetched_record_finished() -> None:
    w = window({P0: (0, 10)})
    w.fetched(P0, 4)
    await w.commit({P0: Commitment(5, "")})
    assert not w.stop.is_set(), "every record fetched finished, but the stop is not reached"

    w.fetched(P0, 9)
    w.read_to(P0, w.stop_of(P0))
    await w.commit({P0: Commitment(9, "")})
    assert not w.stop.is_set(), "reached, but record 9 is not finished"
    await w.commit({P0: Commitment(10, "")})
    assert w.complete
    assert w.stop.is_set()


async def test_a_partition_reached_without_records_is_finished() -> None:
    # Only transaction markers (or aborted records) below the stop: nothing was fetched.
    w = window({P0: (0, 3)})
    w.read_to(P0, w.stop_of(P0))
    w.check()
    assert w.stop.is_set()


@pytest.mark.parametrize(
    ("rewind_to", "reached", "last_fetched"),
    [
        pytest.param(6, False, 5, id="inside-the-window"),
        pytest.param(2, False, None, id="to-the-start"),
        pytest.param(10, True, 9, id="at-the-stop"),
    ],
)
async def test_a_rewind_unreaches_and_forgets_what_is_fetched_again(
    rewind_to: int, reached: bool, last_fetched: int | None
) -> None:
    w = window({P0: (2, 10)})
    w.fetched(P0, 9)
    w.read_to(P0, w.stop_of(P0))
    w.rewind(P0, rewind_to)
    assert w.is_reached(P0) is reached

    # Read to the stop again: finished once the watermark passes the last record still
    # counted as fetched (at once when none is).
    w.read_to(P0, w.stop_of(P0))
    if last_fetched is not None:
        await w.commit({P0: Commitment(last_fetched, "")})
        assert not w.complete
        await w.commit({P0: Commitment(last_fetched + 1, "")})
    assert w.complete


# -- WindowConsumer -------------------------------------------------------------------------


async def test_records_at_or_past_the_stop_are_dropped_and_the_partition_paused() -> None:
    reader = FakeReader({P0: 12})
    reader.queued.append({P0: [Rec(8), Rec(9), Rec(10), Rec(11)]})
    w = window({P0: (8, 10)})
    consumer = WindowConsumer(reader, w)

    batch = await consumer.getmany(P0, timeout_ms=0)
    assert batch == {P0: [Rec(8), Rec(9)]}
    assert w.is_reached(P0)
    assert reader.paused == {P0}
    assert not w.stop.is_set(), "records 8 and 9 are not finished yet"
    await w.commit({P0: Commitment(10, "")})
    assert w.stop.is_set()


async def test_a_batch_wholly_past_the_stop_hands_on_nothing() -> None:
    reader = FakeReader({P0: 20})
    reader.queued.append({P0: [Rec(15), Rec(16)]})
    w = window({P0: (0, 10)})
    assert await WindowConsumer(reader, w).getmany(P0) == {}
    assert w.is_reached(P0)


async def test_the_position_not_the_last_record_says_the_stop_is_reached() -> None:
    # Record 7 is the last one below the stop; a commit marker at 8 and 9 moves the position.
    reader = FakeReader({P0: 8})
    reader.queued.append({P0: [Rec(7)]})
    w = window({P0: (7, 10)})
    consumer = WindowConsumer(reader, w)
    await consumer.getmany(P0)
    assert not w.is_reached(P0)
    assert reader.paused == set()

    reader.positions[P0] = 10
    assert await consumer.getmany(P0) == {}
    assert w.is_reached(P0)
    assert reader.paused == {P0}


async def test_an_empty_window_stops_on_the_first_fetch() -> None:
    reader = FakeReader({P0: 4})
    w = window({P0: (4, 4)})
    assert await WindowConsumer(reader, w).getmany(P0) == {}
    assert w.stop.is_set()


async def test_resume_skips_partitions_read_to_their_stop() -> None:
    reader = FakeReader({P0: 10, P1: 0})
    w = window({P0: (0, 10), P1: (0, 10)})
    consumer = WindowConsumer(reader, w)
    await consumer.getmany()  # P0's position is at its stop: reached and paused
    consumer.pause(P1)
    assert reader.paused == {P0, P1}

    consumer.resume(P0, P1)
    assert reader.paused == {P0}
    assert consumer.assignment() == {P0, P1}


@pytest.mark.parametrize(
    ("seek_to", "resumed"),
    [
        pytest.param(5, True, id="below-the-stop"),
        pytest.param(10, False, id="at-the-stop"),
    ],
)
async def test_a_seek_on_a_parked_partition_reads_it_again(seek_to: int, resumed: bool) -> None:
    reader = FakeReader({P0: 10})
    reader.queued.append({P0: [Rec(8), Rec(9)]})
    w = window({P0: (0, 10)})
    consumer = WindowConsumer(reader, w)
    await consumer.getmany(P0)
    assert reader.paused == {P0}

    consumer.seek(P0, seek_to)
    assert reader.seeks == [(P0, seek_to)]
    assert (P0 not in reader.paused) is resumed
    assert w.is_reached(P0) is not resumed


async def test_a_seek_on_a_partition_still_read_does_not_resume_a_pause() -> None:
    reader = FakeReader({P0: 3})
    w = window({P0: (0, 10)})
    consumer = WindowConsumer(reader, w)
    consumer.pause(P0)  # backpressure
    consumer.seek(P0, 2)
    assert reader.paused == {P0}, "only a partition parked at its stop is resumed by a seek"
