"""Kafka records at the size limit: what the producer accepts, and records built to fill it.

The limit is the one aiokafka's producer checks before sending (its own size estimate
against ``max_request_size``, 1 MiB by default; the broker's default ``max.message.bytes``
is 12 bytes larger), so a record that passes here is produced and stored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from aiokafka.record.default_records import DefaultRecordBatchBuilder

MAX_REQUEST_BYTES = 1_048_576  # aiokafka's default max_request_size
Headers = Sequence[tuple[str, bytes]]
Parts = tuple[bytes | None, bytes | None, Headers]
P = TypeVar("P", bound=Parts)


def record_size(key: bytes | None, value: bytes | None, headers: Headers = ()) -> int:
    """The producer's estimate of a record's size (a batch of its own)."""
    return int(DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, list(headers)))


def producible(key: bytes | None, value: bytes | None, headers: Headers = ()) -> bool:
    """Would the producer send this record (and the broker store it)?"""
    return record_size(key, value, headers) <= MAX_REQUEST_BYTES


def filled(build: Callable[[int], P], slack: int = 0) -> P:
    """``build(n)`` for the largest ``n`` that leaves the record ``slack`` bytes under the
    limit (``build`` grows the record by one byte per unit of ``n``, give or take a varint)."""
    target = MAX_REQUEST_BYTES - slack
    n = target - record_size(*build(0))
    while record_size(*build(n)) > target:
        n -= 1
    return build(n)
