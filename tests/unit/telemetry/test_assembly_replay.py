"""Trace assembly as a replay drives it: no trace opens from the window's stop on, nor one
begun in the lead-in before its start; time that jumps (the log's) labels a trace by the time
it reached first; a stalled replay closes traces early without moving its time; at the log's
end the traces still open are left unjudged."""

from __future__ import annotations

import pytest

from consumer.telemetry.assembly import AssemblyCounts, AssemblyLimits, TraceAssembly
from tests.unit.telemetry.assembly_builder import genai, one, record, tid

LIMITS = AssemblyLimits(quiet_s=10.0, max_wait_s=120.0, max_open_traces=100)
START, STOP = 2, 5  # the window's first offset, and the first past it


def replaying() -> TraceAssembly:
    return TraceAssembly(LIMITS, opens_before=STOP)


def with_lead_in() -> TraceAssembly:
    """A replay reading from offset 0: records 0 and 1 are its lead-in."""
    return TraceAssembly(LIMITS, opens_before=STOP, opens_from=START)


def test_a_trace_opened_in_the_window_takes_its_spans_from_past_the_stop() -> None:
    assembly = replaying()
    assert assembly.add(3, record(genai(0, 1), other={0: 2}), now=0.0) == []
    assert assembly.add(6, record(genai(0, 2), other={0: 1}, roots={0}), now=1.0) == []
    trace = one(assembly.due(now=11.0))
    assert (trace.first_offset, len(trace.spans), trace.span_count) == (3, 2, 5)
    assert (trace.root_seen, trace.closed_by) == (True, "quiet")
    assert assembly.finished(trace.trace_id) == [3, 6]
    counts = assembly.counts
    assert (counts.spans_kept, counts.spans_dropped) == (2, 3)


def test_no_trace_opens_past_the_stop_and_its_spans_are_not_the_windows() -> None:
    assembly = replaying()
    # A root in the window, its GenAI children only past the stop: not a trace of the window.
    assert assembly.add(4, record(other={1: 1}, roots={1}), now=0.0) == [4]
    assert assembly.add(5, record(genai(1, 1), genai(2, 1), other={1: 3, 2: 2}), now=1.0) == [5]
    assert assembly.add(6, record(genai(1, 2), roots={2}), now=2.0) == [6]
    assert assembly.open_count == 0
    assert assembly.due(now=1_000.0) == []
    # Only the window's record counts: its one dropped HTTP root.
    assert assembly.counts == AssemblyCounts(spans_dropped=1)


def test_past_the_stop_a_closed_traces_spans_are_not_counted_late() -> None:
    assembly = replaying()
    assembly.add(0, record(genai(0, 1), roots={0}), now=0.0)
    trace = one(assembly.due(now=10.0))
    assert assembly.add(5, record(genai(0, 2), other={0: 4}), now=11.0) == [5]
    assert (assembly.counts.late_spans, assembly.counts.spans_dropped) == (0, 0)
    assert assembly.finished(trace.trace_id) == [0]


def test_a_record_past_the_stop_feeding_an_open_trace_is_held_with_it() -> None:
    assembly = replaying()
    assembly.add(2, record(genai(0, 1)), now=0.0)
    assert assembly.add(7, record(genai(0, 2), genai(9, 1)), now=1.0) == []
    assert assembly.add(8, record(genai(9, 2)), now=2.0) == [8]
    trace = one(assembly.due(now=120.0))
    assert (trace.closed_by, len(trace.spans)) == ("max_wait", 2)
    assert assembly.finished(trace.trace_id) == [2, 7]


def test_a_trace_begun_in_the_lead_in_is_never_opened_and_its_spans_are_not_the_windows(
) -> None:
    """Its verdict is the window's that holds its first GenAI span: judged from its tail
    here, it would replace that verdict (the same verdict id) with a partial one."""
    assembly = with_lead_in()
    assert assembly.add(1, record(genai(0, 1), other={0: 2}), now=0.0) == [1]
    assert assembly.counts == AssemblyCounts(), "the lead-in is not the window's"
    # In the window: the trace's LLM span and root, and a trace of the window's own.
    assert assembly.add(2, record(genai(0, 2), genai(1, 1), other={0: 1, 1: 1}, roots={0}),
                        now=1.0) == []
    assert assembly.open_count == 1
    trace = one(assembly.due(now=1_000.0))
    assert trace.trace_id == tid(1)
    counts = assembly.counts
    assert (counts.spans_kept, counts.spans_dropped, counts.late_spans) == (1, 1, 0)
    assert assembly.finished(trace.trace_id) == [2]


def test_a_root_seen_in_the_lead_in_lets_a_trace_of_the_window_close_by_quiet() -> None:
    """Its GenAI spans come only in the window: the window's trace, root seen, as live."""
    assembly = with_lead_in()
    assert assembly.add(0, record(other={3: 1}, roots={3}), now=0.0) == [0]
    assembly.add(2, record(genai(3, 1)), now=1.0)
    trace = one(assembly.due(now=11.0))
    assert (trace.trace_id, trace.root_seen, trace.closed_by) == (tid(3), True, "quiet")


def test_leave_open_forgets_the_open_traces_unjudged_and_their_records_are_done() -> None:
    assembly = replaying()
    assembly.add(0, record(genai(0, 1)), now=0.0)
    assembly.add(1, record(genai(1, 1), roots={1}), now=1.0)
    assembly.add(2, record(genai(0, 2)), now=2.0)
    closed = one(assembly.due(now=11.0))  # trace 1, quiet; trace 0 has no root yet
    assert assembly.leave_open() == [0, 2]
    assert (assembly.open_count, assembly.held_bytes) == (0, 0)
    assert assembly.counts.open_at_end == 1
    assert assembly.finished(closed.trace_id) == [1]
    assert assembly.due(now=1_000.0) == []


@pytest.mark.parametrize(
    ("last_at", "closed_by"),
    [
        pytest.param(100.0, "quiet", id="quiet-first"),
        pytest.param(110.0, "quiet", id="both-at-once"),
        pytest.param(115.0, "max_wait", id="max-wait-first"),
    ],
)
def test_a_jump_past_both_times_labels_a_trace_by_the_one_it_reached_first(
    last_at: float, closed_by: str
) -> None:
    """The log's time jumps over quiet stretches: a trace whose last span came at ``last_at``
    (root seen) is due by quiet at ``last_at + 10`` and by max wait at 120."""
    assembly = TraceAssembly(LIMITS)
    assembly.add(0, record(genai(0, 1)), now=0.0)
    assembly.add(1, record(genai(0, 2), roots={0}), now=last_at)
    assert one(assembly.due(now=10_000.0)).closed_by == closed_by


def test_close_next_closes_the_trace_due_next_without_moving_time() -> None:
    assembly = TraceAssembly(LIMITS)
    assembly.add(0, record(genai(0)), now=0.0)  # due at 120 (max wait)
    assembly.add(1, record(genai(1), roots={1}), now=50.0)  # due at 60 (quiet)
    assembly.add(2, record(genai(2)), now=55.0)  # due at 175
    trace = one(assembly.close_next())
    assert (trace.trace_id, trace.closed_by) == (tid(1), "quiet")
    assert assembly.counts.closed_early == 1
    # Time stayed at 55: a span of trace 0 at 56 still joins it; nothing else is due.
    assert assembly.add(3, record(genai(0, 2)), now=56.0) == []
    assert assembly.due(now=56.0) == []
    assert [t.trace_id for t in assembly.close_next()] == [tid(0)]


def test_close_all_closes_every_open_trace_labelled_as_it_would_close() -> None:
    assembly = TraceAssembly(LIMITS)
    assembly.add(0, record(genai(0), roots={0}), now=0.0)
    assembly.add(1, record(genai(1)), now=1.0)
    assembly.add(2, record(genai(2), roots={2}), now=2.0)
    assembly.add(3, record(other={2: 1}), now=115.0)  # trace 2 busy until past its max wait
    closed = {t.trace_id: t.closed_by for t in assembly.close_all()}
    assert closed == {tid(0): "quiet", tid(1): "max_wait", tid(2): "max_wait"}
    counts = assembly.counts
    assert (counts.closed_early, counts.closed_quiet, counts.closed_max_wait) == (3, 1, 2)
    assert assembly.open_count == 0
    assert assembly.close_next() == []


def test_counts_add_up_over_partitions() -> None:
    one_partition = AssemblyCounts(spans_kept=3, spans_dropped=1, closed_quiet=1, late_spans=1)
    other = AssemblyCounts(spans_kept=2, closed_max_wait=2, closed_early=1)
    assert one_partition + other == AssemblyCounts(
        spans_kept=5, spans_dropped=1, closed_quiet=1, closed_max_wait=2, closed_early=1,
        late_spans=1)
