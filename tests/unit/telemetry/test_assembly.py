"""Trace assembly: traces close by quiet or max wait; offsets are done only when every trace
with spans in them is finished, and finished traces spread over records not done are listed
for the commit's progress; bounds hold."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan

from consumer.inputs import OtlpEncoding
from consumer.inputs.otlp.decode import decode_otlp
from consumer.pipeline.offsets import PartitionOffsets
from consumer.telemetry.assembly import AssemblyLimits, TraceAssembly
from consumer.telemetry.recent_ids import RecentIds
from consumer.telemetry.spans import DecodedRecord
from consumer.telemetry.trace_keys import trace_key
from tests.support.otel_spans import Recorder, otlp_json, otlp_proto, rag_trace
from tests.unit.telemetry.assembly_builder import genai, one, record, tid

LIMITS = AssemblyLimits(quiet_s=10.0, max_wait_s=120.0, max_open_traces=100)
ENCODINGS: list[OtlpEncoding] = ["otlp_proto", "otlp_json"]


def sdk_records(*batches: list[ReadableSpan], encoding: OtlpEncoding) -> list[DecodedRecord]:
    """SDK spans encoded by the SDK's encoder, one record per batch, decoded as the worker does."""
    out = []
    for batch in batches:
        value = otlp_proto(batch)
        out.append(decode_otlp(value if encoding == "otlp_proto" else otlp_json(value), encoding))
    return out


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_children_before_the_root_close_quietly_once_the_root_is_in(encoding: OtlpEncoding) -> None:
    recorder = Recorder()
    rag_trace(recorder.tracer)
    sdk = recorder.spans()  # end order: the HTTP root ends last
    assert sdk[-1].parent is None
    children, root = sdk_records(sdk[:-1], sdk[-1:], encoding=encoding)
    assembly = TraceAssembly(LIMITS)
    assert assembly.add(0, children, now=0.0) == []  # it fed an open trace
    assert assembly.due(now=50.0) == []  # quiet, but no root yet
    assert assembly.add(1, root, now=50.0) == []  # the dropped root: a re-read needs it too
    assert assembly.due(now=59.9) == []
    trace = one(assembly.due(now=60.0))
    assert (trace.closed_by, trace.root_seen, trace.first_offset) == ("quiet", True, 0)
    assert sorted(span.name for span in trace.spans) == ["chat", "query", "retrieve"]
    assert trace.span_count == len(sdk)
    assert assembly.finished(trace.trace_id) == [0, 1]
    assert assembly.open_count == assembly.unfinished_count == 0


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_dropped_root_before_its_children_still_counts(encoding: OtlpEncoding) -> None:
    recorder = Recorder()
    rag_trace(recorder.tracer)
    sdk = recorder.spans()
    root, children = sdk_records(sdk[-1:], sdk[:-1], encoding=encoding)
    assert root.kept == []
    assembly = TraceAssembly(LIMITS)
    assert assembly.add(0, root, now=0.0) == [0]
    assert assembly.add(1, children, now=1.0) == []
    assert assembly.due(now=10.9) == []
    trace = one(assembly.due(now=11.0))
    assert (trace.closed_by, trace.root_seen, trace.first_offset) == ("quiet", True, 1)


def test_quiet_counts_from_the_last_span_of_any_kind() -> None:
    assembly = TraceAssembly(LIMITS)
    assembly.add(0, record(genai(0), roots={0}), now=0.0)
    assembly.add(1, record(other={0: 3}), now=8.0)  # database spans of the same trace
    assert assembly.due(now=17.9) == []
    assert one(assembly.due(now=18.0)).span_count == 4
    assert assembly.next_due_at() is None


def test_a_root_that_never_arrives_closes_at_max_wait() -> None:
    assembly = TraceAssembly(LIMITS)
    assembly.add(5, record(genai(0, 1)), now=0.0)
    assembly.add(6, record(genai(0, 2)), now=1.0)
    assert assembly.next_due_at() == 120.0
    assert assembly.due(now=119.9) == []  # quiet for long, but without its root
    trace = one(assembly.due(now=120.0))
    assert (trace.closed_by, trace.root_seen, len(trace.spans)) == ("max_wait", False, 2)
    assert assembly.finished(trace.trace_id) == [5, 6]
    assert (assembly.counts.closed_max_wait, assembly.counts.closed_quiet) == (1, 0)


@pytest.mark.parametrize("finish_first", [False, True], ids=["closed", "finished"])
def test_a_span_after_its_trace_closed_is_late_and_its_record_done(finish_first: bool) -> None:
    assembly = TraceAssembly(LIMITS)
    assembly.add(0, record(genai(0, 1), roots={0}), now=0.0)
    trace = one(assembly.due(now=10.0))
    if finish_first:
        assert assembly.finished(trace.trace_id) == [0]
    assert assembly.add(1, record(genai(0, 2), other={0: 2}), now=11.0) == [1]
    assert assembly.counts.late_spans == 3
    assert assembly.open_count == 0
    assert assembly.due(now=1000.0) == []


def test_a_record_with_late_and_fresh_spans_waits_for_the_fresh_trace() -> None:
    assembly = TraceAssembly(LIMITS)
    assembly.add(0, record(genai(0), roots={0}), now=0.0)
    closed = one(assembly.due(now=10.0))
    assert assembly.add(1, record(genai(0, 2), genai(1)), now=11.0) == []
    assert assembly.finished(closed.trace_id) == [0]
    # Record 1 is read again after a restart: the finished trace's late span there must not
    # open it again, so it is listed for the commit's progress until record 1 is done.
    assert assembly.closed_keys() == [trace_key(tid(0))]
    (fresh,) = assembly.due(now=200.0)
    assert assembly.finished(fresh.trace_id) == [1]
    assert assembly.closed_keys() == []


# Trace A fed by records 3, 7, 9; B by 7; C by 9 and 10; record 8 fed none. A record is done
# once every trace in it is finished; a finished trace with a record not done is spread.
SHARED = {3: [0], 7: [0, 1], 8: [], 9: [0, 2], 10: [2]}


@pytest.mark.parametrize(
    ("order", "done_after", "spread_after"),
    [
        ("ABC", [[3], [7], [9, 10]], ["A", "A", ""]),
        ("CBA", [[10], [], [3, 7, 9]], ["C", "BC", ""]),
        ("BAC", [[], [3, 7], [9, 10]], ["B", "A", ""]),
        ("CAB", [[10], [3, 9], [7]], ["C", "A", ""]),
    ],
    ids=["a-b-c", "c-b-a", "b-a-c", "c-a-b"],
)
def test_an_offset_is_done_when_every_trace_in_it_is_finished(
    order: str, done_after: list[list[int]], spread_after: list[str],
) -> None:
    assembly = TraceAssembly(LIMITS)
    for offset, traces in SHARED.items():
        immediate = assembly.add(offset, record(*(genai(t, offset) for t in traces)), now=0.0)
        assert immediate == ([] if traces else [offset])
    closed = {trace.trace_id: trace for trace in assembly.due(now=120.0)}
    assert {closed[tid(t)].first_offset for t in range(3)} == {3, 7, 9}
    for letter, expected, spread in zip(order, done_after, spread_after, strict=True):
        assert assembly.finished(tid("ABC".index(letter))) == expected
        assert sorted(assembly.closed_keys()) == sorted(
            trace_key(tid("ABC".index(s))) for s in spread)
    assert assembly.finished(tid(0)) == []  # a second acknowledgement changes nothing


def test_a_finished_trace_around_an_open_one_is_not_read_again() -> None:
    """Regression: A in records 0 and 2, B in 1 still open. The watermark stops at 1; the
    progress marks A's record 2 done, so a re-read from 1 reads B alone, never A's tail."""
    assembly = TraceAssembly(LIMITS)
    offsets = PartitionOffsets()
    for offset, rec in enumerate([record(genai(0, 1)), record(genai(1)), record(genai(0, 2))]):
        offsets.add(offset)
        assert assembly.add(offset, rec, now=0.0) == []
    offsets.add(3)
    assert assembly.add(3, record(roots={0}), now=0.0) == []  # A's root: A closes by quiet
    assert one(assembly.due(now=10.0)).trace_id == tid(0)
    for done in assembly.finished(tid(0)):
        offsets.done(done)
    assert offsets.watermark() == 1  # B's first record: the commit moves on past A
    progress = offsets.progress(assembly.closed_keys())
    assert progress is not None
    assert [o for o in range(4) if not progress.is_done(o)] == [1], "only B is read again"
    assert progress.closed == frozenset(), "A is in no record read again"


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("record"), st.frozensets(st.integers(0, 5), max_size=3)),
            st.tuples(st.just("wait"), st.floats(0.0, 40.0)),
            st.tuples(st.just("finish"), st.integers(0, 5)),
        ),
        max_size=120,
    )
)
@example(  # the regression above: 0 (with its root) in records 0 and 2; 1 open in 1
    [("record", frozenset({0})), ("record", frozenset({1})), ("record", frozenset({0})),
     ("wait", 10.0), ("finish", 0)]
)
@settings(max_examples=300, deadline=None)
def test_the_watermark_never_passes_an_unfinished_trace_nor_lands_inside_a_finished_one(
    steps: list[tuple[str, object]],
) -> None:
    """Any interleaving of records, time, closes and finishes: an offset is done exactly when
    no unfinished trace has spans in it (see ``not_done``); every finished trace with spans
    in a record not done is listed for the progress (and no other); and once every trace is
    finished the watermark is past all (nothing left behind)."""
    assembly = TraceAssembly(AssemblyLimits(quiet_s=10.0, max_wait_s=30.0))
    offsets = PartitionOffsets()
    fed: dict[int, set[str]] = {}  # offset -> traces it fed (the model)
    late: dict[int, set[str]] = {}  # offset -> closed traces with late spans in it
    state: dict[str, str] = {}  # trace -> open | closed | finished
    now, offset = 0.0, 0

    def close_due() -> None:
        for trace in assembly.due(now):
            assert state[trace.trace_id] == "open"
            state[trace.trace_id] = "closed"

    def finish(trace_id: str) -> None:
        for done in assembly.finished(trace_id):
            offsets.done(done)
        state[trace_id] = "finished"

    for kind, arg in steps:
        if kind == "record":
            assert isinstance(arg, frozenset)
            offsets.add(offset)
            kept = [genai(t, offset, parent=None if t % 3 == 0 else "00000000000000ff")
                    for t in sorted(arg)]
            fed[offset] = {s.trace_id for s in kept if state.get(s.trace_id, "open") == "open"}
            late[offset] = {s.trace_id for s in kept} - fed[offset]
            for trace_id in fed[offset]:
                state[trace_id] = "open"
            for done in assembly.add(offset, record(*kept), now):
                offsets.done(done)
            offset += 1 + offset % 2  # gaps, as transaction markers leave
        elif kind == "wait":
            assert isinstance(arg, float)
            now += arg
            close_due()
        elif isinstance(arg, int) and state.get(tid(arg)) == "closed":
            finish(tid(arg))
        held = not_done(fed, state)
        assert offsets.in_flight == len(held)
        spread = {t for o in held for t in fed[o] | late[o] if state[t] == "finished"}
        assert sorted(assembly.closed_keys()) == sorted(trace_key(t) for t in spread)
        if fed:  # the lowest record held, or past the last one
            assert offsets.watermark() == min(held, default=offset_after(fed))
    now += 30.0
    close_due()
    for trace_id in [t for t, s in state.items() if s == "closed"]:
        finish(trace_id)
    assert offsets.in_flight == 0
    assert offsets.watermark() == (offset_after(fed) if fed else None)


def offset_after(fed: dict[int, set[str]]) -> int:
    return max(fed) + 1


def not_done(fed: dict[int, set[str]], state: dict[str, str]) -> set[int]:
    """The model: the records fed to a trace not finished."""
    return {o for o, traces in fed.items() if any(state[t] != "finished" for t in traces)}


def test_fifty_thousand_spans_in_one_trace_are_capped_and_it_still_closes() -> None:
    assembly = TraceAssembly(AssemblyLimits(max_spans_per_trace=1_000))
    root = genai(0, 0, parent=None)
    for batch in range(50):
        kept = [genai(0, batch * 1_000 + n) for n in range(1, 1_001)]
        assembly.add(batch, record(*kept), now=float(batch))
    assembly.add(50, record(root), now=50.0)
    trace = one(assembly.due(now=60.0))
    assert (len(trace.spans), trace.capped, trace.span_count) == (1_000, 49_001, 50_001)
    assert trace.closed_by == "quiet"
    assert (assembly.counts.spans_kept, assembly.counts.spans_dropped) == (1_000, 49_001)
    assert assembly.finished(trace.trace_id) == list(range(51))


def test_at_capacity_the_oldest_open_trace_closes_with_what_it_has() -> None:
    assembly = TraceAssembly(AssemblyLimits(max_open_traces=3, max_wait_s=120.0))
    for n in range(3):
        assembly.add(n, record(genai(n)), now=float(n))
    [oldest] = assembly.close_oldest()
    assert (oldest.trace_id, oldest.closed_by, oldest.first_offset) == (tid(0), "capacity", 0)
    assert (assembly.open_count, assembly.counts.closed_capacity) == (2, 1)
    assert assembly.oldest_first_at == 1.0
    assert assembly.finished(oldest.trace_id) == [0]
    closed = assembly.due(now=200.0)
    assert [trace.closed_by for trace in closed] == ["max_wait", "max_wait"]
    assert assembly.close_oldest() == []
    assert assembly.oldest_first_at is None


def test_drop_all_forgets_everything_and_commits_nothing() -> None:
    assembly = TraceAssembly(LIMITS)
    assembly.add(0, record(genai(0), roots={0}), now=0.0)
    assembly.add(1, record(genai(1)), now=0.0)
    closed = one(assembly.due(now=10.0))
    assembly.drop_all()
    assert (assembly.open_count, assembly.unfinished_count) == (0, 0)
    assert assembly.finished(closed.trace_id) == []  # a completion after the revoke
    assert assembly.due(now=1000.0) == []
    # Owned again: the same records are read again and reassembled, not taken as late.
    assert assembly.add(0, record(genai(0)), now=2000.0) == []
    assert assembly.counts.late_spans == 0
    assert assembly.open_count == 1


def test_counts_add_up_to_every_span_carried() -> None:
    assembly = TraceAssembly(AssemblyLimits(max_spans_per_trace=2))
    records = [
        record(genai(0, 1), genai(0, 2), genai(0, 3), other={0: 5}, roots={0}),
        record(other={1: 10}),
        record(genai(1, 4)),
    ]
    assembly.add(0, records[0], now=0.0)
    assembly.due(now=10.0)
    assembly.add(1, records[1], now=11.0)
    assembly.add(2, records[2], now=11.0)
    assembly.add(3, record(genai(0, 9)), now=12.0)  # late
    assembly.due(now=1_000.0)  # kept spans (and those over the bounds) count as traces close
    carried = sum(len(r.kept) + r.dropped for r in records) + 1
    counts = assembly.counts
    assert counts.spans_kept + counts.spans_dropped == carried
    assert (counts.spans_kept, counts.late_spans, counts.closed_quiet) == (3, 1, 1)


def test_an_early_root_is_forgotten_past_the_memory_bound() -> None:
    assembly = TraceAssembly(AssemblyLimits(max_remembered_ids=2))
    for n in range(3):
        assembly.add(n, record(other={n: 1}, roots={n}), now=0.0)
    for n in range(3):
        assembly.add(10 + n, record(genai(n)), now=1.0)
    closed = {trace.trace_id: trace.root_seen for trace in assembly.due(now=11.0)}
    assert closed == {tid(1): True, tid(2): True}  # trace 0's root was forgotten


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda a: a.add(0, record(), now=0.0), "not after"),
        (lambda a: a.finished(tid(0)), "still open"),
    ],
    ids=["offset-repeated", "finished-while-open"],
)
def test_misuse_is_refused(call: Callable[[TraceAssembly], object], message: str) -> None:
    assembly = TraceAssembly(LIMITS)
    assembly.add(0, record(genai(0)), now=0.0)
    with pytest.raises(ValueError, match=message):
        call(assembly)


def test_recent_ids_forget_the_oldest_first() -> None:
    ids = RecentIds(2)
    for id_ in ("a", "b", "a", "c"):
        ids.add(id_)
    assert ("a" in ids, "b" in ids, "c" in ids, len(ids)) == (True, False, True, 2)
    assert ids.pop("a") is True
    assert ids.pop("a") is False
    with pytest.raises(ValueError, match="at least 1"):
        RecentIds(0)


def test_recent_ids_shrink_by_forgetting_the_oldest() -> None:
    ids = RecentIds(4)
    for id_ in "abcd":
        ids.add(id_)
    ids.resize(2)
    assert ("a" in ids, "b" in ids, "c" in ids, "d" in ids) == (False, False, True, True)
    ids.add("e")
    assert (len(ids), "c" in ids) == (2, False)
    with pytest.raises(ValueError, match="at least 1"):
        ids.resize(0)
