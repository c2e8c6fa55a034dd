"""The progress in the commit metadata: round trip, size bound, and never a record skipped."""

from __future__ import annotations

import base64
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer.pipeline.progress import (
    MAX_METADATA_BYTES,
    VERSION,
    Progress,
    decode,
    encode,
)
from consumer.telemetry.trace_keys import trace_key

# A watermark, the offsets read above it (each done or not), the finished traces' keys.
states = st.tuples(
    st.integers(min_value=0, max_value=2**40),
    st.lists(st.tuples(st.integers(1, 40), st.booleans()), max_size=400),
    st.lists(st.binary(min_size=8, max_size=8), max_size=60, unique=True),
)


def progress_of(state: tuple[int, list[tuple[int, bool]], list[bytes]]) -> tuple[
        Progress, list[int], set[int]]:
    """The progress of a partition read from ``watermark`` (which is never done), with the
    offsets read and those not done."""
    watermark, steps, keys = state
    read, not_done, offset = [watermark], {watermark}, watermark
    for gap, done in steps:
        offset += gap
        read.append(offset)
        if not done:
            not_done.add(offset)
    return Progress.of(watermark, offset + 1, not_done, keys), read, not_done


@given(states)
def test_the_metadata_reads_back_as_written_or_is_refused_for_its_size(
    state: tuple[int, list[tuple[int, bool]], list[bytes]],
) -> None:
    progress, read, not_done = progress_of(state)
    metadata = encode(progress)
    if metadata is None:  # never cut: the caller keeps its last commit instead
        whole = encode(progress, max_bytes=2**31)
        assert whole is not None
        assert len(whole) > MAX_METADATA_BYTES
        return
    assert len(metadata) <= MAX_METADATA_BYTES
    assert metadata.isascii()
    back = decode(metadata, progress.watermark)
    assert back == progress
    for offset in read:  # a record not done is never skipped; one done always is
        assert back.is_done(offset) == (offset not in not_done)
    assert not back.is_done(progress.fetched_to)  # past the reading: nothing known


@given(st.integers(1, 20), st.integers(0, 3000))
def test_a_budget_too_small_refuses_rather_than_cuts(keys: int, watermark: int) -> None:
    progress = Progress.of(watermark, watermark + 10, [watermark],
                           [trace_key(str(n)) for n in range(keys)])
    metadata = encode(progress)
    assert metadata is not None
    assert encode(progress, max_bytes=len(metadata) - 1) is None


def test_hundreds_of_closed_traces_and_thousands_of_interleaved_records_fit() -> None:
    # Steady overlapping traffic: every other record of the last 4,000 not done yet.
    not_done = [1_000_000 + 2 * n for n in range(4_000)]
    keys = [trace_key(f"{n:032x}") for n in range(250)]
    metadata = encode(Progress.of(not_done[0], not_done[-1] + 1, not_done, keys))
    assert metadata is not None
    assert len(metadata) <= MAX_METADATA_BYTES


@pytest.mark.parametrize("metadata", [
    pytest.param("", id="empty"),
    pytest.param("some tool's own note", id="foreign"),
    pytest.param(VERSION + "!!!", id="not-base64"),
    pytest.param(VERSION + base64.b64encode(b"not zlib").decode(), id="not-zlib"),
    pytest.param(VERSION + base64.b64encode(zlib.compress(b"\xff" * 12)).decode(),
                 id="varint-too-long"),
    pytest.param(VERSION + base64.b64encode(zlib.compress(b"\x00" * 2_000_000)).decode(),
                 id="inflates-past-the-bound"),
    pytest.param(VERSION + base64.b64encode(zlib.compress(bytes([5, 3, 1, 0, 9, 0]))).decode(),
                 id="a-run-past-fetched-to"),
])
def test_a_metadata_string_that_cannot_be_read_means_everything_is_read_again(
    metadata: str,
) -> None:
    progress = decode(metadata, 5)
    assert progress == Progress.nothing(5)
    assert not progress.is_done(5)
    assert not progress.is_done(6)


def test_metadata_written_for_another_offset_is_not_trusted() -> None:
    written = encode(Progress.of(10, 20, [10, 15]))
    assert written is not None
    assert decode(written, 10).is_done(12)
    assert decode(written, 0) == Progress.nothing(0)  # offsets reset by hand since


def test_trace_keys_are_eight_bytes_and_tell_traces_apart() -> None:
    keys = {trace_key(f"{n:032x}") for n in range(10_000)}
    assert len(keys) == 10_000
    assert all(len(key) == 8 for key in keys)
    assert trace_key("\ud800") != trace_key("a")  # a lone surrogate is still a key
