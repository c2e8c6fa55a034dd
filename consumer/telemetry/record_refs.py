"""Which record of a partition's assembly: an offset, and which of its two topics (pure).

A partition's assembly reads one partition number of the spans topic and, with
``OTLP_LOGS_TOPIC``, the same number of the logs topic (co-partitioned): a trace's spans and
its log records land there together. The assembly holds records back from the commit by a
plain int: a spans record's is its offset, a logs record's its offset plus ``LOGS``. So a
worker without a logs topic tracks offsets as they are, and sorting refs keeps each topic's
records in offset order.
"""

from __future__ import annotations

Lane = int  # 0: the spans topic; 1: the logs topic
SPANS: Lane = 0
LOGS_LANE: Lane = 1
LOGS = 1 << 62  # above any offset a partition reaches (Kafka offsets are signed 64-bit)


def record_ref(offset: int, lane: Lane = SPANS) -> int:
    """The ref of the record at ``offset`` of ``lane``'s topic."""
    return offset + LOGS if lane else offset


def lane_of(ref: int) -> Lane:
    """Which topic the record is of."""
    return LOGS_LANE if ref >= LOGS else SPANS


def offset_of(ref: int) -> int:
    """The record's offset in its own topic."""
    return ref - LOGS if ref >= LOGS else ref
