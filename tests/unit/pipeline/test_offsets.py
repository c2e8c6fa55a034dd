"""The watermark tracker: commits only below records whose outcome is known, with the
progress above it; a partition taken over skips what its previous owner finished."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer.pipeline.offsets import OffsetTracker, PartitionOffsets
from consumer.pipeline.progress import Progress


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
    assert PartitionOffsets().progress() is None
    assert not PartitionOffsets().changed()


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
    assert offsets.changed()
    assert offsets.watermark() == 1
    offsets.committed(1, offsets.snapshot)
    assert not offsets.changed()
    offsets.committed(0, 0)  # a stale acknowledgement
    assert not offsets.changed()
    offsets.done(1)
    assert offsets.changed()
    assert offsets.watermark() == 2


def test_progress_changes_above_a_watermark_that_stands_still() -> None:
    offsets = PartitionOffsets()
    for offset in range(4):
        offsets.add(offset)
    offsets.done(2)
    offsets.committed(0, offsets.snapshot)
    assert not offsets.changed()
    offsets.done(3)  # the watermark stays at 0; what is done above it grew
    assert offsets.changed()
    progress = offsets.progress()
    assert progress is not None
    assert (progress.watermark, progress.fetched_to, progress.unfinished) == (0, 4, ((0, 2),))


def test_a_taken_over_partition_skips_what_its_previous_owner_finished() -> None:
    inherited = Progress.of(10, 20, [10, 11, 15], [b"k" * 8])
    offsets = PartitionOffsets(inherited)
    taken = {offset: offsets.take(offset) for offset in (10, 12, 15)}
    assert taken == {10: "reread", 12: "skipped_done", 15: "reread"}
    assert offsets.in_flight == 2  # 10 and 15; 12 was done at once
    # Not read past the previous owner's reading yet: its progress goes on in this one's.
    progress = offsets.progress([b"j" * 8])
    assert progress is not None
    assert progress.watermark == 10
    assert progress.fetched_to == 20
    assert progress.unfinished == ((10, 11), (15, 16))  # 11 was skipped over, never read
    assert progress.closed == {b"k" * 8, b"j" * 8}
    assert offsets.take(25) == "new"  # past it: its own state says it all
    assert offsets.inherited is None
    after = offsets.progress()
    assert after is not None
    assert (after.fetched_to, after.closed) == (26, frozenset())


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
    assert tracker.changed() == []


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
        mark = offsets.watermark()
        if offsets.changed():
            assert mark is not None
            assert mark >= last_commit
            offsets.committed(mark, offsets.snapshot)
            last_commit = mark
            assert not offsets.changed()
