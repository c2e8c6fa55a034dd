"""A partition's progress, carried in the commit's metadata string (pure).

The committed offset alone cannot say what is finished: records finish out of order, and a
span record feeds traces that finish at different times. So each commit also writes, as
Confluent's Parallel Consumer does with its incomplete offsets:

- ``fetched_to``: one past the last record the committer had read;
- ``unfinished``: the records in ``[watermark, fetched_to)`` not yet done, as runs; every
  other record there is done, and a new owner skips it;
- ``closed``: keys of traces already finished that still have spans in unfinished records
  (span input), so that a new owner takes those spans for late ones instead of opening the
  trace again from part of its spans.

A new owner re-reads exactly the unfinished records and everything from ``fetched_to`` on.
Nothing done is redone, nothing not done is skipped.

The string is ``"g1:"`` and base64 of the zlib-compressed varints (``_pack``). It must fit the
broker's ``offset.metadata.max.bytes`` (4,096 by default). What does not fit is never left
out silently: ``encode`` returns None, and the caller commits nothing new for the partition
(its last commit still holds, so the next owner only redoes more). A string that cannot be
read (another version, a reset by hand) reads as no progress: everything from the committed
offset is re-read.
"""

from __future__ import annotations

import base64
import binascii
import math
import zlib
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from consumer.telemetry.trace_keys import KEY_BYTES

VERSION = "g1:"
MAX_METADATA_BYTES = 4_000  # under the broker's default offset.metadata.max.bytes (4,096)
_MAX_PAYLOAD_BYTES = 1 << 20  # decompressed: a hostile string cannot inflate past this


class Commitment(NamedTuple):
    """What one partition commits: the watermark and its progress (aiokafka takes it as an
    ``(offset, metadata)`` pair)."""

    offset: int
    metadata: str



@dataclass(frozen=True, slots=True)
class Progress:
    """What a commit at ``watermark`` says is done above it."""

    watermark: int
    fetched_to: int  # one past the last record read; from here on nothing is known
    unfinished: tuple[tuple[int, int], ...] = ()  # runs [start, end) of records not done
    closed: frozenset[bytes] = frozenset()  # keys of finished traces (``trace_key``)

    @classmethod
    def of(cls, watermark: int, fetched_to: int, not_done: Iterable[int],
           closed: Iterable[bytes] = ()) -> Progress:
        """From the offsets not done (any order) and the finished traces' keys."""
        runs: list[tuple[int, int]] = []
        for offset in sorted(not_done):
            if runs and runs[-1][1] == offset:
                runs[-1] = (runs[-1][0], offset + 1)
            else:
                runs.append((offset, offset + 1))
        return cls(watermark, max(fetched_to, watermark), tuple(runs), frozenset(closed))

    @classmethod
    def nothing(cls, watermark: int) -> Progress:
        """No progress known above ``watermark``: everything from it is read again."""
        return cls(watermark, watermark)

    def is_done(self, offset: int) -> bool:
        """Was the record at ``offset`` finished by the committer (below the watermark, or
        above it and not unfinished), so that it is skipped? Past ``fetched_to``: no."""
        if offset < self.watermark:
            return True
        if offset >= self.fetched_to:
            return False
        at = bisect_right(self.unfinished, (offset, math.inf)) - 1  # the run starting at or below
        return at < 0 or offset >= self.unfinished[at][1]

    @property
    def reread(self) -> int:
        """Records below ``fetched_to`` that are read again (the unfinished ones)."""
        return sum(end - start for start, end in self.unfinished)


def encode(progress: Progress, max_bytes: int = MAX_METADATA_BYTES) -> str | None:
    """The metadata string, or None when it would not fit in ``max_bytes``."""
    text = VERSION + base64.b64encode(zlib.compress(_pack(progress), 9)).decode("ascii")
    return text if len(text) <= max_bytes else None


def decode(metadata: str | None, committed: int) -> Progress:
    """The progress a commit at ``committed`` carried; none known when the string is empty,
    of another version, damaged, or written for another offset."""
    if not metadata or not metadata.startswith(VERSION):
        return Progress.nothing(committed)
    try:
        raw = base64.b64decode(metadata[len(VERSION):], validate=True)
        inflate = zlib.decompressobj()
        payload = inflate.decompress(raw, _MAX_PAYLOAD_BYTES)
        if inflate.unconsumed_tail or not inflate.eof:
            return Progress.nothing(committed)
        progress = _unpack(payload)
    except (binascii.Error, zlib.error, ValueError):
        return Progress.nothing(committed)
    if progress.watermark != committed:  # offsets reset by hand: the metadata is stale
        return Progress.nothing(committed)
    return progress


# -- the payload: unsigned varints, then the keys ------------------------------------------------
# watermark, fetched_to - watermark, runs, (gap, length) per run, keys, then 8 bytes per key.


def _pack(progress: Progress) -> bytes:
    out = bytearray()
    numbers = [progress.watermark, progress.fetched_to - progress.watermark,
               len(progress.unfinished)]
    at = progress.watermark
    for start, end in progress.unfinished:
        numbers += [start - at, end - start]
        at = end
    numbers.append(len(progress.closed))
    for number in numbers:
        _varint(out, number)
    for key in sorted(progress.closed):
        out += key
    return bytes(out)


def _unpack(payload: bytes) -> Progress:
    reader = _Reader(payload)
    watermark, span, count = reader.number(), reader.number(), reader.number()
    runs: list[tuple[int, int]] = []
    at = watermark
    for _ in range(count):
        start = at + reader.number()
        length = reader.number()
        if length < 1:
            raise ValueError("an empty run")
        at = start + length
        runs.append((start, at))
    fetched_to = watermark + span
    if at > fetched_to or (runs and runs[0][0] != watermark):
        raise ValueError("runs past fetched_to, or the watermark done")
    keys = reader.keys(reader.number())
    reader.end()
    return Progress(watermark, fetched_to, tuple(runs), frozenset(keys))


def _varint(out: bytearray, number: int) -> None:
    if number < 0:
        raise ValueError(f"negative: {number}")
    while number >= 0x80:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)


class _Reader:
    __slots__ = ("_at", "_data")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def number(self) -> int:
        number, shift = 0, 0
        while True:
            if self._at >= len(self._data) or shift > 63:
                raise ValueError("a varint cut short or too long")
            byte = self._data[self._at]
            self._at += 1
            number |= (byte & 0x7F) << shift
            if byte < 0x80:
                return number
            shift += 7

    def keys(self, count: int) -> Sequence[bytes]:
        end = self._at + count * KEY_BYTES
        if end > len(self._data):
            raise ValueError("keys cut short")
        keys = [self._data[at:at + KEY_BYTES] for at in range(self._at, end, KEY_BYTES)]
        self._at = end
        return keys

    def end(self) -> None:
        if self._at != len(self._data):
            raise ValueError("bytes after the keys")
