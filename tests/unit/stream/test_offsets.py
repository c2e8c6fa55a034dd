"""The watermark tracker: commits only below records whose outcome is known."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer.stream.offsets import OffsetTracker, PartitionOffsets


def test_watermark_is_lowest_pending_offset() -> None:
    offsets = PartitionOffsets()
    for offset in (5, 6, 7, 8):
        offsets.add(offset)
    offsets.done(6)
    offsets.done(8)
    assert offsets.watermark() == 5
    offsets.done(5)
    assert offsets.watermark() == 7
    offsets.done(7)
    assert offsets.watermark() == 9


def test_nothing_added_has_no_watermark() -> None:
    assert PartitionOffsets().watermark() is None
    assert PartitionOffsets().to_commit() is None


def test_offsets_must_increase() -> None:
    offsets = PartitionOffsets()
    offsets.add(3)
    with pytest.raises(ValueError, match="not after"):
        offsets.add(3)


def test_unknown_offset_is_refused() -> None:
    offsets = PartitionOffsets()
    offsets.add(1)
    with pytest.raises(ValueError, match="never added"):
        offsets.done(2)


def test_commit_never_goes_backwards() -> None:
    offsets = PartitionOffsets()
    offsets.add(0)
    offsets.add(1)
    offsets.done(0)
    assert offsets.to_commit() == 1
    offsets.committed(1)
    assert offsets.to_commit() is None
    offsets.committed(0)  # a stale acknowledgement
    assert offsets.to_commit() is None
    offsets.done(1)
    assert offsets.to_commit() == 2


def test_uncommitted_counts_records_until_a_commit_covers_them() -> None:
    offsets = PartitionOffsets()
    for offset in range(4):
        offsets.add(offset)
    for offset in range(4):
        offsets.done(offset)
    assert offsets.in_flight == 0
    assert offsets.uncommitted == 4
    offsets.committed(2)
    assert offsets.uncommitted == 2


def test_tracker_drops_revoked_partitions() -> None:
    tracker: OffsetTracker[str] = OffsetTracker()
    first = tracker.partition("a")
    first.add(0)
    tracker.drop("a")
    assert tracker.current("a") is None
    second = tracker.partition("a")
    assert second is not first
    assert tracker.to_commit() == {}


@given(
    st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=200, unique=True),
    st.randoms(use_true_random=False),
    st.integers(min_value=0, max_value=200),
)
def test_committed_offset_never_passes_an_unfinished_record(
    raw: list[int], rng: random.Random, finished: int
) -> None:
    """Whatever order records finish in, the watermark sits on the lowest unfinished one."""
    fetched = sorted(raw)
    offsets = PartitionOffsets()
    for offset in fetched:
        offsets.add(offset)
    order = fetched[:]
    rng.shuffle(order)
    done = set(order[: min(finished, len(order))])
    for offset in order[: len(done)]:
        offsets.done(offset)
        offsets.done(offset)  # duplicates change nothing
    pending = [offset for offset in fetched if offset not in done]
    expected = pending[0] if pending else fetched[-1] + 1
    assert offsets.watermark() == expected
    assert offsets.in_flight == len(pending)
    assert all(offset in done for offset in fetched if offset < expected)


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 50)), max_size=300))
def test_commits_are_monotonic_under_any_interleaving(steps: list[tuple[bool, int]]) -> None:
    """Interleaved adds, completions and commits: what we commit only ever grows."""
    offsets = PartitionOffsets()
    next_offset = 0
    added: list[int] = []
    last_commit = -1
    for is_add, pick in steps:
        if is_add or not added:
            offsets.add(next_offset)
            added.append(next_offset)
            next_offset += 1 + pick % 3  # gaps, as transaction markers leave
        else:
            offsets.done(added[pick % len(added)])
        mark = offsets.to_commit()
        if mark is not None:
            assert mark > last_commit
            offsets.committed(mark)
            last_commit = mark
