"""Batch input lines -> batch files within the endpoint's limits (pure).

OpenAI takes at most 50,000 requests and 200 MB per batch input file. Lines keep their order
and fill each file up to whichever limit comes first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from consumer.replay.batch.requests import BatchLine

MAX_REQUESTS_PER_FILE = 50_000
MAX_BYTES_PER_FILE = 200 * 1024 * 1024

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class FileLimits:
    """How much one batch input file may hold."""

    max_requests: int = MAX_REQUESTS_PER_FILE
    max_bytes: int = MAX_BYTES_PER_FILE


def plan_files(
    lines: Iterable[BatchLine], limits: FileLimits = FileLimits()
) -> list[list[BatchLine]]:
    """The lines, in order, cut into files that each fit ``limits``. ValueError for a line
    larger than a whole file may be (it could never be sent)."""
    return _cut(lines, lambda line: (line.custom_id, len(line.data)), limits)


def plan_ids(
    sizes: Iterable[tuple[str, int]], limits: FileLimits = FileLimits()
) -> list[list[str]]:
    """``plan_files`` on (custom id, line size) pairs: the ids of each file. A caller whose
    lines wait on disk plans with this, so the lines need not all be in memory at once."""
    return [[custom_id for custom_id, _ in group]
            for group in _cut(sizes, lambda item: item, limits)]


def _cut(
    items: Iterable[_T], measure: Callable[[_T], tuple[str, int]], limits: FileLimits
) -> list[list[_T]]:
    """The items, in order, cut into files within ``limits``; ``measure`` gives each one's
    custom id and size in bytes."""
    files: list[list[_T]] = []
    current: list[_T] = []
    size = 0
    for item in items:
        custom_id, length = measure(item)
        if length > limits.max_bytes:
            raise ValueError(
                f"the batch request {custom_id} is {length:,} bytes, more than a "
                f"batch file may hold ({limits.max_bytes:,})"
            )
        if current and (len(current) >= limits.max_requests
                        or size + length > limits.max_bytes):
            files.append(current)
            current, size = [], 0
        current.append(item)
        size += length
    if current:
        files.append(current)
    return files
