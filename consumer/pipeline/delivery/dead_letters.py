"""A dead letter's key, value and headers, cut so the record always fits the broker (pure).

A record that fit on the traces topic can outgrow the limit once the DLQ headers are added; a
dead letter the producer refuses is retried for ever, and its partition stalls. So the size
is planned here with aiokafka's own estimate of a record's size (what the producer checks
against ``MAX_RECORD_BYTES`` before a send) and its varint sizes:

1. Our headers (the reason, the source coordinates) always go, with room kept for the markers
   of what was cut.
2. The key goes whole when it fits alone (it keys the dead letter as it keyed the trace). A
   key that does not (only a hostile key is that large) is cut, leaving the value and
   headers what they need, up to half.
3. The value and the original headers share what is left: the smaller keeps all it needs,
   the larger the rest. A value or key is cut to its first bytes; original headers are kept
   in order, each one that no longer fits dropped whole.

Markers (headers, decimal): ``dlq.key_truncated`` and ``dlq.value_truncated`` give the
original size in bytes, ``dlq.headers_dropped`` how many original headers were left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from consumer.kafka.record_size import FRAMING_BYTES, Header, record_bytes, varint_bytes

# aiokafka's producer refuses a record above its max_request_size (1 MiB by default); the
# broker's default max.message.bytes is 12 bytes larger. A DLQ topic configured below 1 MiB
# needs this lowered to match.
MAX_RECORD_BYTES = 1_048_576
_MARKERS = ("dlq.key_truncated", "dlq.value_truncated", "dlq.headers_dropped")
_MARKER_VALUE_BYTES = 20  # a 64-bit count in decimal


class DeadLetterRecord(NamedTuple):
    """What is sent to the DLQ topic."""

    key: bytes | None
    value: bytes | None
    headers: list[Header]


def fit(
    key: bytes | None,
    value: bytes | None,
    originals: Sequence[Header],
    ours: Sequence[Header],
    max_bytes: int = MAX_RECORD_BYTES,
) -> DeadLetterRecord:
    """The original key, value and headers with ``ours`` added, cut to ``max_bytes``."""
    if record_bytes(key, value, [*originals, *ours]) <= max_bytes:
        return DeadLetterRecord(key, value, [*originals, *ours])
    # Step 1: our headers, every marker and the header count (a varint, at most 5 bytes);
    # what is left holds the key and value fields and the original headers.
    fixed = [*ours, *((name, b"9" * _MARKER_VALUE_BYTES) for name in _MARKERS)]
    room = max_bytes - FRAMING_BYTES - 5 - sum(_header_bytes(header) for header in fixed)
    # Step 2: the key, whole if it fits alone (a byte left for the value's field); a key
    # that does not is cut to leave the value and headers what they need, up to half.
    value_need = _field_bytes(value)
    headers_need = sum(_header_bytes(header) for header in originals)
    alone = _field_bytes(key) <= room - 1
    kept_key = _cut(key, room - 1 if alone else room - min(value_need + headers_need, room // 2))
    room -= _field_bytes(kept_key)
    # Step 3: the value and the original headers share the rest, the smaller one first.
    smaller = min(value_need, headers_need, room // 2)
    kept_value = _cut(value, smaller if value_need <= headers_need else room - smaller)
    kept_headers = _headers_within(originals, room - _field_bytes(kept_value))
    markers = [
        (name, str(len(original)).encode())
        for name, original, kept in (("dlq.key_truncated", key, kept_key),
                                     ("dlq.value_truncated", value, kept_value))
        if original is not None and kept is not None and len(kept) < len(original)
    ]
    if len(kept_headers) < len(originals):
        markers.append(("dlq.headers_dropped", str(len(originals) - len(kept_headers)).encode()))
    return DeadLetterRecord(kept_key, kept_value, [*kept_headers, *ours, *markers])


def _cut(data: bytes | None, room: int) -> bytes | None:
    """``data`` cut so its field takes at most ``room`` bytes (at least one: empty)."""
    if data is None or _field_bytes(data) <= room:
        return data
    return data[: max(0, room - varint_bytes(room))]


def _headers_within(headers: Sequence[Header], room: int) -> list[Header]:
    """The headers, in order, that fit in ``room`` (each one that does not is skipped)."""
    kept: list[Header] = []
    for header in headers:
        size = _header_bytes(header)
        if size <= room:
            kept.append(header)
            room -= size
    return kept


def _header_bytes(header: Header) -> int:
    name, value = header
    return _field_bytes(name.encode("utf-8")) + _field_bytes(value)


def _field_bytes(data: bytes | None) -> int:
    """A length-prefixed field: a varint length, then the bytes (null: the varint -1)."""
    return 1 if data is None else varint_bytes(len(data)) + len(data)
