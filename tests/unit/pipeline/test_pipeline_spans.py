"""The pipeline on span formats (``TRACES_FORMAT=otlp_proto``), with in-memory stand-ins for
Kafka and spans from the real OTel SDK: verdicts from traces spread over records, nothing for
traces without an answer, and the watermark held at the first record of an open trace through
closing, pausing, revoking and draining."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiokafka import TopicPartition
from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry.sdk.trace import ReadableSpan
from structlog.testing import capture_logs

from consumer import wiring
from consumer.inputs.formats import SpanFormat
from consumer.ops.metrics import REGISTRY
from consumer.pipeline.progress import Commitment
from consumer.settings import Settings
from consumer.telemetry import trace_event as candidate
from consumer.telemetry.assembly import AssemblyLimits
from consumer.telemetry.trace_keys import trace_key
from tests.support.otel_spans import KIND, Recorder, otlp_proto
from tests.support.span_pipeline import (
    ANSWER,
    P0,
    P1,
    Harness,
    hex_trace_id,
    rag_spans,
    span_id_of,
)
from tests.support.transactional_fakes import a_verdict, empty_sink
from tests.support.waiting import until


async def test_a_rag_trace_over_two_records_gets_one_verdict_from_its_first_record() -> None:
    spans = rag_spans()
    harness = Harness()
    harness.judge.open(ANSWER)
    harness.consumer.feed(P0, otlp_proto(spans[:3]), otlp_proto(spans[3:]))
    await harness.start()
    await until(lambda: len(harness.sink.verdicts) == 1 and harness.committed() == 2)
    await harness.stop()
    [verdict] = harness.sink.verdicts
    assert verdict.trace_id == hex_trace_id(spans)
    assert verdict.span_id == span_id_of(spans, "query")  # the chain's output.value
    assert verdict.source is not None
    assert verdict.source.offset == 0
    assert verdict.context_source == "retrieval"
    assert verdict.assembly is not None
    assert (verdict.assembly.spans, verdict.assembly.root_seen, verdict.assembly.closed_by) == (
        3, True, "quiet")
    assert harness.pipeline.outcomes == {"pass": 1}


async def test_a_trace_whose_mapping_fails_gets_an_error_verdict_before_its_offsets_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(spans: object, let_go: object = ()) -> None:
        raise RecursionError("maximum recursion depth exceeded\nwhile decoding JSON")

    monkeypatch.setattr(candidate, "map_trace", broken)
    spans = rag_spans()
    harness = Harness()
    harness.consumer.feed(P0, otlp_proto(spans[:3]), otlp_proto(spans[3:]))
    await harness.start()
    await until(lambda: harness.committed() == 2)
    await harness.stop()
    [verdict] = harness.sink.verdicts
    assert (verdict.verdict, verdict.trace_id) == ("error", hex_trace_id(spans))
    assert verdict.error is not None
    assert (verdict.error.type, verdict.error.message) == (
        "internal_error", "RecursionError: maximum recursion depth exceeded")
    assert verdict.source is not None
    assert (verdict.source.topic, verdict.source.offset) == (P0.topic, 0)
    assert harness.judge.started == []
    assert harness.pipeline.outcomes == {"error": 1}


def _http_only() -> list[ReadableSpan]:
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("GET /health"), \
            recorder.tracer.start_as_current_span("SELECT 1"):
        pass
    return recorder.spans()


def _indexing() -> list[ReadableSpan]:
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("index") as root:
        root.set_attribute(KIND, OpenInferenceSpanKindValues.CHAIN.value)
        with recorder.tracer.start_as_current_span("embed") as embed:
            embed.set_attribute(KIND, OpenInferenceSpanKindValues.EMBEDDING.value)
    return recorder.spans()


def _llm_without_answer() -> list[ReadableSpan]:
    recorder = Recorder()
    with recorder.tracer.start_as_current_span("chat") as llm:
        llm.set_attribute(KIND, OpenInferenceSpanKindValues.LLM.value)
        llm.set_attribute(SpanAttributes.INPUT_VALUE, "Who wrote Dune?")
    return recorder.spans()


@pytest.mark.parametrize(
    ("make", "outcomes"),
    [
        (_http_only, {}),
        (_indexing, {"no_candidate": 1}),
        (_llm_without_answer, {"skipped": 1}),
    ],
    ids=["no-genai-span", "indexing-embeddings", "llm-call-without-an-answer"],
)
async def test_a_trace_without_an_answer_gets_no_verdict_and_its_offsets_are_done(
    make: Callable[[], list[ReadableSpan]], outcomes: dict[str, int]
) -> None:
    harness = Harness()
    harness.consumer.feed(P0, otlp_proto(make()), otlp_proto(make()))
    await harness.start()
    await until(lambda: harness.committed() == 2)
    await asyncio.sleep(0.1)  # past the quiet time: whatever would be judged is
    await harness.stop()
    assert harness.sink.verdicts == []
    assert harness.judge.started == []
    assert dict(harness.pipeline.outcomes) == {k: 2 * n for k, n in outcomes.items()}


async def test_the_watermark_never_passes_the_first_record_of_an_open_trace() -> None:
    slow, quick = rag_spans("Who wrote Dune?"), rag_spans("Who wrote Emma?")
    harness = Harness()
    harness.judge.open(ANSWER)
    # Offset 0: the slow trace without its root (it stays open); 1-2: a whole trace, then
    # HTTP spans only.
    harness.consumer.feed(P0, otlp_proto(slow[:-1]), otlp_proto(quick), otlp_proto(_http_only()))
    await harness.start()
    await until(lambda: len(harness.sink.verdicts) == 1)
    await asyncio.sleep(0.2)
    assert harness.sink.published == [hex_trace_id(quick)]
    assert {c[P0] for c in harness.commits} <= {0}, "offsets 1-2 are done, 0 is not"
    harness.consumer.feed(P0, otlp_proto(slow[-1:]))  # its root, at offset 3
    await until(lambda: harness.committed() == 4)
    await harness.stop()
    assert harness.sink.published == [hex_trace_id(quick), hex_trace_id(slow)]
    assert [v.source.offset for v in harness.sink.verdicts if v.source] == [1, 0]


async def test_an_undecodable_record_is_dead_lettered_and_passed() -> None:
    harness = Harness()
    harness.consumer.feed(P0, b"\xff\x00 not protobuf", b"")
    await harness.start()
    await until(lambda: harness.committed() == 2)
    await harness.stop()
    assert [offset for offset, _ in harness.sink.dead] == [0, 1]
    assert harness.pipeline.outcomes == {"dead_lettered": 2}


async def test_past_max_open_traces_the_oldest_closes_for_capacity_and_fetching_goes_on(
) -> None:
    # One open trace fills the worker; the next trace's record does not wait for it (no
    # time passes for it while fetching waits): the oldest closes with what it has, labelled.
    rootless, whole = rag_spans("Who wrote Dune?")[:-1], rag_spans("Who wrote Emma?")
    harness = Harness(max_open_traces=1, max_wait_s=30.0)
    harness.judge.open(ANSWER)
    harness.consumer.feed(P0, otlp_proto(rootless))
    await harness.start()
    await until(lambda: harness.pipeline._spans is not None
                and harness.pipeline._spans.open_traces == 1)
    await asyncio.sleep(0.1)
    assert harness.sink.verdicts == [], "at the bound, not past it: nothing closes"
    closed = _metric("groundedness_traces_closed_total", closed_by="capacity")
    harness.consumer.feed(P0, otlp_proto(whole))
    await until(lambda: len(harness.sink.verdicts) == 2)
    await until(lambda: harness.committed() == 2)
    assert not harness.consumer.ever_paused
    await harness.stop()
    first, second = harness.sink.verdicts
    assert first.assembly is not None
    assert first.assembly.closed_by == "capacity"
    assert not first.assembly.root_seen
    assert second.trace_id == hex_trace_id(whole)
    assert second.assembly is not None
    assert second.assembly.closed_by == "quiet"
    assert _metric("groundedness_traces_closed_total", closed_by="capacity") == closed + 1


async def test_revoke_mid_assembly_commits_below_the_open_trace_and_the_next_owner_reassembles(
) -> None:
    slow, quick = rag_spans("Who wrote Dune?"), rag_spans("Who wrote Emma?")
    harness = Harness(assigned={P0, P1})
    harness.consumer.feed(P0, otlp_proto(slow[:-1]), otlp_proto(quick))
    await harness.start()
    await until(lambda: harness.judge.started == [ANSWER])  # the quick trace, gate closed
    # Revoked while one trace is open and one is being judged: the judged one is waited for
    # (then cancelled: revoke_timeout_s), nothing passes offset 0, the assembly is dropped.
    await harness.pipeline.on_partitions_revoked({P0})
    harness.consumer.assigned = {P1}
    assert harness.committed() in (None, 0)
    assert harness.sink.verdicts == []
    # Handed back: read again from the committed offset, with the slow trace's root.
    harness.judge.open(ANSWER)
    harness.consumer.assigned = {P0, P1}
    harness.consumer.next_offset[P0] = 0
    await harness.pipeline.on_partitions_assigned({P0})
    harness.consumer.feed(P0, otlp_proto(slow[:-1]), otlp_proto(quick), otlp_proto(slow[-1:]))
    await until(lambda: harness.committed() == 3)
    await harness.stop()
    assert sorted(harness.sink.published) == sorted([hex_trace_id(slow), hex_trace_id(quick)])


async def test_the_drain_does_not_judge_open_traces_and_leaves_their_records_uncommitted(
) -> None:
    slow, quick = rag_spans("Who wrote Dune?"), rag_spans("Who wrote Emma?")
    harness = Harness()
    harness.judge.open(ANSWER)
    harness.consumer.feed(P0, otlp_proto(quick), otlp_proto(slow[:-1]), otlp_proto(_http_only()))
    await harness.start()
    await until(lambda: harness.committed() == 1)
    await harness.stop()
    assert harness.sink.published == [hex_trace_id(quick)]
    assert harness.committed() == 1, "offset 1 holds an open trace: a restart re-reads it"


async def test_records_held_by_open_traces_do_not_fill_the_in_flight_window() -> None:
    # Open traces are waiting, not work: with room for 2 records being worked on (and a wide
    # window, as wiring gives span formats), 6 open traces of one record each are all read.
    harness = Harness(max_in_flight=2, max_uncommitted=100)
    harness.consumer.feed(P0, *(otlp_proto(rag_spans(f"Q{n}?")[:-1]) for n in range(6)))
    await harness.start()
    await until(lambda: harness.pipeline._spans is not None
                and harness.pipeline._spans.open_traces == 6)
    assert not harness.consumer.ever_paused
    await harness.stop()
    assert harness.sink.verdicts == []
    assert harness.committed() in (None, 0)


async def test_exactly_once_holds_every_verdict_whose_trace_began_in_the_same_record() -> None:
    # Without partition_traces_by_id one record carries many traces: their verdicts share
    # its offset as ``source`` and must all be held, then sent in one transaction.
    sink, producers, _ = empty_sink()
    p0 = TopicPartition("traces", 0)
    await sink.start_partition(p0)
    for name in ("a", "b"):
        await sink.publish(a_verdict(p0, 0).model_copy(update={"verdict_id": f"v-{name}"}))
    assert await sink.commit({p0: Commitment(1, "")}) == {p0: Commitment(1, "")}
    assert producers[sink.transactional_id(p0)].sent_to == [
        ("verdicts", b"v-a"), ("verdicts", b"v-b")]


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_wiring_gives_span_formats_the_assembly_settings_and_a_wide_window(encoding: str) -> None:
    settings = Settings(traces_format=encoding, trace_quiet_seconds=2, trace_max_wait_seconds=9,
                        max_open_traces=50)
    config = wiring.pipeline_config(settings)
    assert config.input_format.name == encoding
    assert isinstance(config.input_format, SpanFormat)
    assert config.assembly == AssemblyLimits(quiet_s=2, max_wait_s=9, max_open_traces=50)
    assert config.max_uncommitted == max(wiring.max_uncommitted(settings), 1000, 100_000)
    assert not isinstance(wiring.pipeline_config(Settings()).input_format, SpanFormat), (
        "the record path")


def _metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_the_span_metrics_count_what_assembly_did() -> None:
    spans = rag_spans()  # 2 DB spans and the HTTP root dropped; chain, retriever, LLM kept
    harness = Harness()
    harness.judge.open(ANSWER)
    kept, dropped = (_metric("groundedness_spans_total", outcome=o) for o in ("kept", "dropped"))
    quiet, late = (_metric("groundedness_traces_closed_total", closed_by="quiet"),
                   _metric("groundedness_late_spans_total"))
    harness.consumer.feed(P0, otlp_proto(spans[:3]))
    await harness.start()
    await until(lambda: _metric("groundedness_open_traces") == 1)
    harness.consumer.feed(P0, otlp_proto(spans[3:]))
    await until(lambda: len(harness.sink.verdicts) == 1)
    harness.consumer.feed(P0, otlp_proto(spans[:1]))  # the same DB span again: late
    await until(lambda: harness.committed() == 3)
    await harness.stop()
    assert _metric("groundedness_spans_total", outcome="kept") == kept + 3
    assert _metric("groundedness_spans_total", outcome="dropped") == dropped + 3 + 1
    assert _metric("groundedness_traces_closed_total", closed_by="quiet") == quiet + 1
    assert _metric("groundedness_late_spans_total") == late + 1
    assert _metric("groundedness_open_traces") == 0


async def test_a_trace_split_over_two_partitions_is_counted_logged_and_judged_in_parts(
) -> None:
    # The exporter without partition_traces_by_id: the chain and retriever on one partition,
    # the LLM and the root on the other. Each part is a trace of its own there; the part
    # without its root closes only at its max wait.
    spans = rag_spans()
    trace_id = hex_trace_id(spans)
    harness = Harness(assigned={P0, P1}, max_wait_s=0.3)
    harness.judge.open(ANSWER)
    split, unkeyed = (_metric("groundedness_split_traces_total"),
                      _metric("groundedness_unkeyed_span_records_total"))
    chain_and_retriever = [span for span in spans if span.name in ("query", "retrieve")]
    rest = [span for span in spans if span not in chain_and_retriever]
    harness.consumer.feed(P0, otlp_proto(chain_and_retriever))  # no key: the exporter's default
    with capture_logs() as logs:
        await harness.start()
        await until(lambda: harness.pipeline._spans is not None
                    and harness.pipeline._spans.open_traces == 1)
        harness.consumer.feed(P1, otlp_proto(rest), key=trace_id.encode())
        await until(lambda: len(harness.sink.verdicts) == 2)
        await until(lambda: harness.committed(P0) == 1 and harness.committed(P1) == 1)
        await harness.stop()
    assert _metric("groundedness_split_traces_total") == split + 1
    assert _metric("groundedness_unkeyed_span_records_total") == unkeyed + 1
    events = [entry["event"] for entry in logs]
    assert "trace_split_across_partitions" in events
    assert "span_records_not_keyed_by_trace" in events
    by_partition = {v.source.partition: v for v in harness.sink.verdicts if v.source}
    assert {v.trace_id for v in by_partition.values()} == {trace_id}
    assert by_partition[0].assembly is not None
    assert by_partition[1].assembly is not None
    assert (by_partition[0].assembly.root_seen, by_partition[0].assembly.closed_by) == (
        False, "max_wait")
    assert (by_partition[1].assembly.root_seen, by_partition[1].assembly.closed_by) == (
        True, "quiet")


async def test_open_traces_of_a_revoked_partition_leave_the_gauge() -> None:
    harness = Harness(assigned={P0, P1})
    harness.consumer.feed(P0, otlp_proto(rag_spans("Who wrote Dune?")[:-1]))
    harness.consumer.feed(P1, otlp_proto(rag_spans("Who wrote Emma?")[:-1]))
    await harness.start()
    await until(lambda: _metric("groundedness_open_traces") == 2)
    await harness.pipeline.on_partitions_revoked({P0})
    harness.consumer.assigned = {P1}
    assert _metric("groundedness_open_traces") == 1  # another worker's to count now
    await harness.stop()


async def test_a_record_with_an_unreadable_span_says_where_and_the_rest_is_judged() -> None:
    spans = rag_spans("Who wrote Dune?")
    question = b"Who wrote Dune?"
    record = otlp_proto(spans).replace(question, question[:-2] + b"\xff?")  # bad UTF-8
    harness = Harness()
    harness.judge.open(ANSWER)
    harness.consumer.feed(P0, record)
    with capture_logs() as logs:
        await harness.start()
        await until(lambda: harness.committed() == 1)
        await harness.stop()
    [warning] = [entry for entry in logs if entry["event"] == "otlp_spans_unreadable"]
    assert (warning["partition"], warning["offset"], warning["spans"]) == (0, 0, 1)
    assert "UTF-8" in warning["reason"]
    assert harness.sink.published == [hex_trace_id(spans)]  # judged without the bad span
    assert harness.sink.dead == []


async def test_a_finished_trace_spread_over_a_record_read_again_is_not_judged_again() -> None:
    # One record carries two traces (no partition_traces_by_id): A finishes, B stays open,
    # so the record stays not done and A is spread over it. The commit lists A; the next
    # owner reads that record again for B, and takes A's spans there for late ones.
    a, b = rag_spans("Who wrote Dune?"), rag_spans("Who wrote Emma?")
    first = Harness()
    first.judge.open(ANSWER)
    first.consumer.feed(P0, otlp_proto([*a[:-1], *b[:-1]]), otlp_proto(a[-1:]))
    await first.start()
    await until(lambda: len(first.sink.verdicts) == 1)
    await until(lambda: first.commits.progress.get(P0) is not None
                and first.commits.progress[P0].closed != frozenset())
    await first.stop()
    progress = first.commits.progress[P0]
    assert first.sink.published == [hex_trace_id(a)]
    assert (first.committed(), progress.unfinished) == (0, ((0, 1),)), "B holds record 0"
    assert progress.closed == {trace_key(hex_trace_id(a))}

    late = _metric("groundedness_late_spans_total")
    second = Harness(inherited={P0: progress})
    second.judge.open(ANSWER)
    second.consumer.feed(P0, otlp_proto([*a[:-1], *b[:-1]]), otlp_proto(a[-1:]),
                         otlp_proto(b[-1:]))
    await second.start()
    await until(lambda: second.committed() == 3)
    await second.stop()
    assert second.sink.published == [hex_trace_id(b)], "A is not judged again from record 0"
    verdict = second.sink.verdicts[0]
    assert verdict.assembly is not None
    assert verdict.assembly.spans == 3, "B whole: its spans in the record read again"
    assert _metric("groundedness_late_spans_total") > late
