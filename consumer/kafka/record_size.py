"""A record's size on the wire, as aiokafka's producer estimates it (pure).

The dead-letter path cuts a record to fit the producer's limit before it sends it, so it needs
the same arithmetic as the producer: the batch framing and the length-prefixed fields.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import size_of_varint

Header = tuple[str, bytes]
# What aiokafka's estimate adds to a record's key, value and headers: the batch header and
# the most the record's own framing can take.
FRAMING_BYTES: int = (DefaultRecordBatchBuilder.estimate_size_in_bytes(None, None, [])
                      - DefaultRecordBatchBuilder.size_of(None, None, []))


def record_bytes(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    """An upper bound of the record's size in a batch of its own (the producer's estimate)."""
    size: int = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, list(headers))
    return size


def varint_bytes(value: int) -> int:
    """The bytes of ``value`` as a zig-zag varint (a length prefix)."""
    size: int = size_of_varint(value)
    return size
