"""Assembly with a logs topic: GenAI log records join their trace as its spans do (open it,
keep it active, hold their records, come late after its close), and each record is done in
its own topic's lane of refs."""

from __future__ import annotations

from typing import Any

from consumer.telemetry.assembly import AssemblyLimits, TraceAssembly
from consumer.telemetry.record_refs import LOGS_LANE, lane_of, offset_of, record_ref
from consumer.telemetry.spans import DecodedRecord, LogEvent, SpanEvent
from tests.unit.telemetry.assembly_builder import genai, one, record, tid

LIMITS = AssemblyLimits(quiet_s=10.0, max_wait_s=120.0, max_open_traces=100)
CONTENT = "gen_ai.event.content"


def logs(trace: int, *events: tuple[str, dict[str, Any]], span: int = 1) -> DecodedRecord:
    """A logs record with ``events`` of trace ``trace``'s span number ``span``."""
    found = [LogEvent(tid(trace), f"{span:016x}", SpanEvent(name, 5 + n, {CONTENT: body}))
             for n, (name, body) in enumerate(events)]
    return DecodedRecord(logs=found, spans_per_trace={tid(trace): len(found)} if found else {})


def L(offset: int) -> int:
    return record_ref(offset, LOGS_LANE)


def test_refs_keep_each_topics_offsets_apart_and_in_order() -> None:
    refs = [record_ref(7), L(0), L(7), record_ref(8)]
    assert [(lane_of(r), offset_of(r)) for r in refs] == [(0, 7), (1, 0), (1, 7), (0, 8)]
    assert record_ref(7) == 7, "without a logs topic a ref is the offset"
    assert sorted(refs) == [7, 8, L(0), L(7)]


def test_log_records_that_come_first_open_the_trace_and_join_its_span_at_the_close() -> None:
    assembly = TraceAssembly(LIMITS)
    user = ("gen_ai.user.message", {"content": "Who wrote Dune?"})
    choice = ("gen_ai.choice", {"message": {"role": "assistant", "content": "Herbert."}})
    assert assembly.add(L(0), logs(0, user, choice), now=0.0) == []
    assert assembly.is_open(tid(0))
    assert assembly.add(0, record(genai(0), roots=[0]), now=5.0) == []
    assert assembly.due(now=14.9) == [], "the span's arrival was activity"
    trace = one(assembly.due(now=15.0))
    [span] = trace.spans
    assert [e.name for e in span.events] == ["gen_ai.user.message", "gen_ai.choice"]
    assert trace.first_offset == 0, "the source is the spans record, though the logs came first"
    done = assembly.finished(tid(0))
    assert done == [0, L(0)], "both topics' records are done once the trace is"


def test_a_trace_of_log_records_alone_closes_by_max_wait_and_its_source_is_a_log_record() -> None:
    assembly = TraceAssembly(LIMITS)
    assembly.add(L(3), logs(0, ("gen_ai.user.message", {"content": "Q?"})), now=0.0)
    trace = one(assembly.due(now=120.0))
    assert (trace.closed_by, lane_of(trace.first_offset), offset_of(trace.first_offset)) == (
        "max_wait", LOGS_LANE, 3)
    assert trace.spans == (), "no span to join: nothing for the mapping (no candidate)"
    assert assembly.finished(tid(0)) == [L(3)]


def test_a_log_record_after_the_close_is_late_and_its_record_done_at_once() -> None:
    assembly = TraceAssembly(LIMITS)
    assembly.add(0, record(genai(0), roots=[0]), now=0.0)
    one(assembly.due(now=10.0))
    assembly.finished(tid(0))
    late = logs(0, ("gen_ai.choice", {"message": {"content": "late"}}))
    assert assembly.add(L(0), late, now=11.0) == [L(0)]
    assert assembly.counts.late_spans == 1
    assert assembly.open_count == 0


def test_each_topics_record_is_done_once_no_trace_in_it_is_open() -> None:
    assembly = TraceAssembly(LIMITS)
    assembly.add(0, record(genai(0), genai(1, 2), roots=[0, 1]), now=0.0)
    assembly.add(L(0), logs(1, ("gen_ai.user.message", {"content": "Q?"}), span=2), now=1.0)
    assert [t.trace_id for t in assembly.due(now=10.5)] == [tid(0)]
    assert assembly.finished(tid(0)) == [], "record 0 is still held by trace 1"
    assert {t.trace_id for t in assembly.due(now=11.0)} == {tid(1)}
    assert assembly.finished(tid(1)) == [0, L(0)]


def test_the_same_log_record_sent_twice_is_kept_once() -> None:
    assembly = TraceAssembly(LIMITS)
    user = ("gen_ai.user.message", {"content": "Q?"})
    assembly.add(0, record(genai(0), roots=[0]), now=0.0)
    assembly.add(L(0), logs(0, user), now=1.0)
    assembly.add(L(1), logs(0, user), now=2.0)  # an exporter's retry of the same batch
    [span] = one(assembly.due(now=12.0)).spans
    assert [e.name for e in span.events] == ["gen_ai.user.message"]


def test_a_replay_window_applies_to_each_topics_own_offsets() -> None:
    # Spans window [10, 20); logs window [100, 200): a logs record at 50 is the lead-in.
    assembly = TraceAssembly(LIMITS, opens_from=10, opens_before=20)
    assembly.window(LOGS_LANE, 100, 200)
    assert assembly.add(L(50), logs(0, ("gen_ai.user.message", {"content": "Q?"})),
                        now=0.0) == [L(50)]
    assert assembly.add(10, record(genai(0), roots=[0]), now=1.0) == [10]
    assert not assembly.is_open(tid(0)), "begun before the window: another window's"
    assembly.add(L(150), logs(1, ("gen_ai.user.message", {"content": "Q?"})), now=2.0)
    assert assembly.is_open(tid(1))
    assembly.add(L(250), logs(2, ("gen_ai.user.message", {"content": "Q?"})), now=3.0)
    assert not assembly.is_open(tid(2)), "past the logs window's stop: opens nothing"
