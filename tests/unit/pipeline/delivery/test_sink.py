"""Dead letters always fit the broker's record limit, whatever part of the original is huge.

The limit checked is the one the producer enforces before sending (aiokafka's own estimate
against ``max_request_size``, 1 MiB by default; the broker's default ``max.message.bytes`` is
a little larger), so a dead letter built here is never refused for its size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from consumer.pipeline.delivery.dead_letters import MAX_RECORD_BYTES
from consumer.pipeline.delivery.sink import Headers, dead_letter_record
from tests.support.records import MAX_REQUEST_BYTES, filled, producible, record_size

# The most an input record can carry and still be produced: anything the worker reads fits.
INPUT_ROOM = MAX_REQUEST_BYTES - record_size(b"", b"", [])


@dataclass(frozen=True)
class FakeRecord:
    """A consumed record, as the sink sees it."""

    key: bytes | None
    value: bytes | None
    headers: Headers = field(default_factory=list)
    topic: str = "traces-" + "t" * 200  # Kafka topic names go up to 249 characters
    partition: int = 2**31 - 1
    offset: int = 2**63 - 1
    timestamp: int = 2**63 - 1


def many_headers(count: int) -> list[tuple[str, bytes]]:
    """``count`` equal headers, then one that fills the record to 50 bytes under the limit."""
    size = INPUT_ROOM // count - 16
    headers = [(f"h{i:08d}", b"v" * size) for i in range(count)]
    _, _, filled_headers = filled(lambda n: (b"k", b"{}", [*headers, ("pad", b"p" * n)]), 50)
    return list(filled_headers)


LONG_REASON = "not a trace event: " + "why " * 500 + "\nsecond line"
TRACEPARENT = ("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
RECORDS = [
    pytest.param(FakeRecord(b"k", b"{}", [TRACEPARENT]), id="small"),
    pytest.param(FakeRecord(b"k", b"v" * (INPUT_ROOM - 100), [TRACEPARENT]), id="value-1mib"),
    pytest.param(FakeRecord(b"k" * (INPUT_ROOM - 100), b"{}"), id="key-1mib"),
    pytest.param(FakeRecord(b"k" * (INPUT_ROOM - 100), None), id="key-1mib-tombstone"),
    pytest.param(FakeRecord(b"k", b"{}", [("big", b"h" * (INPUT_ROOM - 100)), TRACEPARENT]),
                 id="one-header-1mib"),
    pytest.param(FakeRecord(b"k", b"{}", many_headers(10_000)), id="10000-headers"),
    pytest.param(FakeRecord(b"k" * 600_000, b"{}", [("big", b"h" * (INPUT_ROOM - 600_120))]),
                 id="key-and-headers"),
    pytest.param(FakeRecord(b"k" * 300_000, b"v" * 300_000,
                            [("big", b"h" * (INPUT_ROOM - 600_120))]), id="all-three-large"),
    pytest.param(FakeRecord(None, b"v" * (INPUT_ROOM - 10)), id="no-key-value-1mib"),
]


@pytest.mark.parametrize("record", RECORDS)
def test_a_dead_letter_always_fits(record: FakeRecord) -> None:
    assert producible(record.key, record.value, record.headers), "the input itself fits"
    key, value, headers = dead_letter_record(record, LONG_REASON)
    assert producible(key, value, headers)
    ours = dict(headers)
    assert ours["dlq.source.offset"] == str(record.offset).encode()
    reason = ours["dlq.reason"].decode()
    assert len(reason) <= 300
    assert len(reason.splitlines()) == 1


@pytest.mark.parametrize("record", RECORDS)
def test_what_is_cut_is_a_prefix_and_says_so(record: FakeRecord) -> None:
    key, value, headers = dead_letter_record(record, "reason")
    ours = dict(headers)
    for name, original, kept in (("key", record.key, key), ("value", record.value, value)):
        assert (original is None) == (kept is None), name
        if original is None or kept is None:
            continue
        assert original.startswith(kept), name
        marker = ours.get(f"dlq.{name}_truncated")
        assert marker == (None if kept == original else str(len(original)).encode()), name
    originals = list(record.headers)
    kept_originals = [h for h in headers if not h[0].startswith("dlq.")]
    remaining = iter(originals)
    assert all(h in remaining for h in kept_originals), "original headers kept in order"
    dropped = len(originals) - len(kept_originals)
    assert ours.get("dlq.headers_dropped") == (str(dropped).encode() if dropped else None)


def test_a_record_that_fits_keeps_everything() -> None:
    record = FakeRecord(b"key", b'{"trace_id": 1}', [TRACEPARENT, ("tenant", b"acme")])
    key, value, headers = dead_letter_record(record, "not a trace event: trace_id: ...")
    assert (key, value) == (record.key, record.value)
    assert headers[:2] == [TRACEPARENT, ("tenant", b"acme")]
    assert [name for name, _ in headers[2:]] == [
        "dlq.reason", "dlq.source.topic", "dlq.source.partition", "dlq.source.offset",
        "dlq.source.timestamp", "dlq.worker",
    ]


@pytest.mark.parametrize(
    ("record", "cut"),
    [
        pytest.param(FakeRecord(b"k" * 10, b"v" * (INPUT_ROOM - 100), [TRACEPARENT]), "value",
                     id="value"),
        pytest.param(FakeRecord(b"k" * (INPUT_ROOM - 100), b"{}", [TRACEPARENT]), "key",
                     id="key"),
        pytest.param(FakeRecord(b"k", b"{}", [("big", b"h" * (INPUT_ROOM - 100)), TRACEPARENT]),
                     "headers", id="headers"),
    ],
)
def test_only_the_huge_part_is_cut(record: FakeRecord, cut: str) -> None:
    key, value, headers = dead_letter_record(record, "reason")
    assert (key == record.key) == (cut != "key")
    assert (value == record.value) == (cut != "value")
    assert (TRACEPARENT in headers) is True
    assert (("big", b"h" * (INPUT_ROOM - 100)) in headers) is False


def test_the_limit_is_the_producers() -> None:
    assert MAX_RECORD_BYTES == MAX_REQUEST_BYTES


SIZES = st.integers(0, INPUT_ROOM)


@settings(max_examples=200, deadline=None)
@given(key_size=SIZES | st.none(), value_size=SIZES | st.none(),
       header_sizes=st.lists(SIZES, max_size=6), reason=st.text(max_size=400))
def test_any_producible_record_gives_a_producible_dead_letter(
    key_size: int | None, value_size: int | None, header_sizes: list[int], reason: str
) -> None:
    key = None if key_size is None else b"k" * key_size
    value = None if value_size is None else b"v" * value_size
    headers = [(f"h{i}", b"h" * size) for i, size in enumerate(header_sizes)]
    assume(producible(key, value, headers))
    record = FakeRecord(key, value, headers)
    kept_key, kept_value, kept_headers = dead_letter_record(record, reason)
    assert producible(kept_key, kept_value, kept_headers)
    assert (kept_key is None) == (key is None)
    assert (kept_value is None) == (value is None)
    cut_parts = [name for name in ("key", "value") if f"dlq.{name}_truncated" in dict(
        kept_headers)]
    if not cut_parts and "dlq.headers_dropped" not in dict(kept_headers):
        assert (kept_key, kept_value) == (key, value)
