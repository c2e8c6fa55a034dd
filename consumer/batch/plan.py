"""Batch input lines -> batch files within the endpoint's limits (pure).

OpenAI takes at most 50,000 requests and 200 MB per batch input file. Lines keep their order
and fill each file up to whichever limit comes first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from consumer.batch.requests import BatchLine

MAX_REQUESTS_PER_FILE = 50_000
MAX_BYTES_PER_FILE = 200 * 1024 * 1024


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
    files: list[list[BatchLine]] = []
    current: list[BatchLine] = []
    size = 0
    for line in lines:
        if len(line.data) > limits.max_bytes:
            raise ValueError(
                f"the batch request {line.custom_id} is {len(line.data):,} bytes, more than a "
                f"batch file may hold ({limits.max_bytes:,})"
            )
        if current and (len(current) >= limits.max_requests
                        or size + len(line.data) > limits.max_bytes):
            files.append(current)
            current, size = [], 0
        current.append(line)
        size += len(line.data)
    if current:
        files.append(current)
    return files
