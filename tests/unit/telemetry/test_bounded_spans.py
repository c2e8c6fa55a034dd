"""A trace's kept spans within bounds: the first and the latest kept, the middle let go."""

from __future__ import annotations

from consumer.telemetry.assembly import AssemblyLimits, TraceAssembly
from consumer.telemetry.bounded_spans import KeptSpans, span_bytes
from consumer.telemetry.conventions import map_trace
from consumer.telemetry.spans import Span, SpanEvent
from tests.unit.telemetry.assembly_builder import genai, record, tid
from tests.unit.telemetry.span_builder import KIND, LLM, messages, sid

OUT = "llm.output_messages"


def _sized(n: int, chars: int, char: str = "x") -> Span:
    return Span(tid(0), f"{n:016x}", "00000000000000ff", "", n, n + 1, {"k": char * chars})


def test_within_the_bounds_every_span_is_kept_in_arrival_order() -> None:
    kept = KeptSpans(max_spans=4, max_bytes=10**6)
    spans = [genai(0, n) for n in range(4)]
    for span in spans:
        kept.add(span)
    assert (kept.spans(), kept.capped) == (tuple(spans), 0)


def test_over_the_count_the_first_half_and_the_latest_half_stay() -> None:
    kept = KeptSpans(max_spans=4, max_bytes=10**9)
    for n in range(10):
        kept.add(genai(0, n))
    assert [int(span.span_id, 16) for span in kept.spans()] == [0, 1, 8, 9]
    assert (len(kept), kept.capped) == (4, 6)
    assert kept.let_go == {f"{n:016x}" for n in range(2, 8)}


def test_over_the_bytes_the_latest_replace_older_ones_and_the_size_follows() -> None:
    unit = span_bytes(_sized(0, 5_000))
    kept = KeptSpans(max_spans=100, max_bytes=4 * unit)  # two for the first, two the latest
    changes = [kept.add(_sized(n, 5_000)) for n in range(6)]
    assert [int(span.span_id, 16) for span in kept.spans()] == [0, 1, 4, 5]
    assert kept.size == sum(changes) == 4 * unit
    assert kept.capped == 2


def test_a_big_document_is_cut_to_fit_not_lost() -> None:
    kept = KeptSpans(max_spans=10, max_bytes=400_000)  # a span alone: at most 100,000
    for char in ("x", "沙"):  # Latin-1 text takes a byte a character, this one two
        span = _sized(1 if char == "x" else 2, 300_000, char)
        kept.add(span)
        [held] = [s for s in kept.spans() if s.span_id == span.span_id]
        text = held.attributes["k"]
        assert text.startswith(char * 1_000)
        assert text.endswith("...")
        assert span_bytes(held) <= 100_000 < span_bytes(span)
    assert (len(kept), kept.capped) == (2, 0)


def test_a_span_that_cannot_be_cut_to_fit_is_let_go() -> None:
    many_small = Span(tid(0), sid(1), "00000000000000ff", "", 0, 1,
                      {f"attribute.{n}": "short text" for n in range(2_000)})
    kept = KeptSpans(max_spans=10, max_bytes=400_000)
    assert kept.add(many_small) == 0
    assert (len(kept), kept.capped, kept.size, kept.let_go) == (0, 1, 0, {sid(1)})


def test_the_size_follows_the_memory_text_takes() -> None:
    latin, wide = span_bytes(_sized(0, 10_000)), span_bytes(_sized(0, 10_000, "沙"))
    assert 10_000 <= latin - span_bytes(_sized(0, 0)) < 10_100
    assert 20_000 <= wide - span_bytes(_sized(0, 0)) < 20_200  # two bytes a character
    with_event = Span(tid(0), sid(1), None, "chat", 0, 1, {"k": ""},
                      (SpanEvent("gen_ai.choice", 0, {"content": "y" * 5_000}),))
    assert span_bytes(with_event) - span_bytes(_sized(0, 0)) >= 5_000


def test_a_long_agent_trace_keeps_its_final_answer() -> None:
    # 5,000 LLM calls: the cap keeps the first 500 and the latest 500, the final answer last.
    assembly = TraceAssembly(AssemblyLimits(max_spans_per_trace=1_000))
    for n in range(5_000):
        reply = "The final answer." if n == 4_999 else f"step {n}"
        span = Span(tid(0), f"{n + 1:016x}", "00000000000000ff", "chat", n, n + 1,
                    {KIND: LLM, **messages(OUT, ("assistant", reply))})
        assembly.add(n, record(span), now=0.0)
    [trace] = assembly.due(now=1_000.0)
    assert (len(trace.spans), trace.capped) == (1_000, 4_000)
    mapped = map_trace(trace.spans)
    assert mapped is not None
    assert mapped.answer == "The final answer."


def test_held_bytes_fill_the_assembly_and_closing_frees_them() -> None:
    assembly = TraceAssembly(AssemblyLimits(max_held_bytes=1_000, max_open_traces=100))
    for trace in range(3):
        span = Span(tid(trace), sid(1), "00000000000000ff", "", 0, 1, {"k": "x" * 399})
        assembly.add(trace, record(span), now=float(trace))
    assert assembly.open_count == 3
    assert assembly.held_bytes > 1_000  # 3 x 400 bytes, though 3 traces are far from 100
    assembly.due(now=1_000.0)
    assert assembly.held_bytes == 0


def test_a_span_sent_twice_is_kept_once_and_counted_dropped() -> None:
    # An exporter that retries a batch the broker had taken sends its spans again.
    assembly = TraceAssembly(AssemblyLimits())
    batch = record(genai(0, 1), genai(0, 2), genai(0, 3))
    assembly.add(0, batch, now=0.0)
    assembly.add(1, batch, now=1.0)
    [trace] = assembly.due(now=1_000.0)
    assert [span.span_id for span in trace.spans] == [sid(1), sid(2), sid(3)]
    assert (trace.capped, assembly.counts.spans_kept, assembly.counts.spans_dropped) == (0, 3, 3)


def test_a_span_let_go_from_the_latest_may_come_back() -> None:
    kept = KeptSpans(max_spans=2, max_bytes=10**9)  # one first, one latest
    for n in (0, 1, 2, 1):
        kept.add(genai(0, n))
    assert [int(span.span_id, 16) for span in kept.spans()] == [0, 1]
    assert (kept.capped, kept.duplicates) == (2, 0)


def test_children_of_spans_let_go_are_not_taken_for_the_outermost() -> None:
    # A long agent capped in its middle: the last step's LLM call lost its parent chain.
    agent = Span(tid(0), sid(1), "00000000000000ff", "agent", 0, 100,
                 {KIND: "AGENT", "output.value": "Frank Herbert wrote Dune."})
    orphan = Span(tid(0), sid(3), sid(2), "chat", 90, 95,
                  {KIND: LLM, **messages(OUT, ("assistant", "thinking step 599"))})
    confused = map_trace([orphan, agent])
    assert confused is not None
    assert confused.answer == "thinking step 599"  # two tops: no outermost span
    mapped = map_trace([orphan, agent], let_go={sid(2)})
    assert mapped is not None
    assert (mapped.answer, mapped.answer_span_id) == ("Frank Herbert wrote Dune.", sid(1))
