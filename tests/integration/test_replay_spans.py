"""`groundedness replay` of a span topic, through the real command, a real broker and the fake
judge over HTTP. Spans come from the real OTel SDK, one trace per record keyed by its hex trace
id, as the collector's Kafka exporter writes them with ``partition_traces_by_id``: a trace
straddling ``--to`` is judged whole and once, as the live worker judged it; a trace starting
after ``--to`` is not, nor one begun before ``--from`` (the window of its first GenAI span
judges it), nor one still being written when the replay starts; a trace whose root never comes
closes by its max wait; a garbage record in the window is dead-lettered; the dry run counts
what the replay then does, past ``MAX_OPEN_TRACES`` too; a SIGTERM leaves
``complete: false``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry.sdk.trace import ReadableSpan

from consumer.cli import main
from consumer.localjudge.server import JudgeServer
from scripts.span_transport import SpanEncoding, encode
from tests.support.fake_judge import ScriptedJudge
from tests.support.otel_spans import KIND, Recorder, otlp_proto, rag_trace
from tests.support.streams import (
    Topics,
    create_topics,
    group_offsets,
    in_process_worker,
    read_all,
    verdicts_by_trace,
)
from tests.support.waiting import until
from tests.support.workers import worker_env

pytestmark = pytest.mark.integration

PARTITIONS = 3
HOUR_MS = 3_600_000
GARBAGE = b"\xff\x00 not a TracesData"
SAME_AS_LIVE = ("verdict_id", "trace_id", "span_id", "assembly", "source", "context_source",
                "project_id")


class Trace:
    """One trace's spans (end order), its hex id, and its records' key."""

    def __init__(self, spans: list[ReadableSpan]) -> None:
        self.spans = spans
        context = spans[0].context
        assert context is not None
        self.trace_id = f"{context.trace_id:032x}"
        self.key = self.trace_id.encode()


def rag(question: str) -> Trace:
    """A RAG request: 2 DB spans, retriever, LLM, chain, then the HTTP root (3 kept)."""
    recorder = Recorder(service="rag-api")
    rag_trace(recorder.tracer, question)
    return Trace(recorder.spans())


def answered(answer: str) -> Trace:
    """A chain over one LLM call whose answer is ``answer`` (both kept; the chain is root)."""
    recorder = Recorder(service="rag-api")
    with recorder.tracer.start_as_current_span("query") as chain:
        chain.set_attributes({KIND: OpenInferenceSpanKindValues.CHAIN.value,
                              SpanAttributes.INPUT_VALUE: "Who wrote Dune?"})
        with recorder.tracer.start_as_current_span("chat") as llm:
            llm.set_attribute(KIND, OpenInferenceSpanKindValues.LLM.value)
        chain.set_attribute(SpanAttributes.OUTPUT_VALUE, answer)
    return Trace(recorder.spans())


def indexing() -> Trace:
    """Indexing work: a chain root over an embedding, no answer to a user (2 kept)."""
    recorder = Recorder(service="rag-api")
    with recorder.tracer.start_as_current_span("index") as root:
        root.set_attribute(KIND, OpenInferenceSpanKindValues.CHAIN.value)
        with recorder.tracer.start_as_current_span("embed") as embed:
            embed.set_attribute(KIND, OpenInferenceSpanKindValues.EMBEDDING.value)
    return Trace(recorder.spans())


async def produce(bootstrap: str, topic: str,
                  records: list[tuple[bytes, bytes, int | None]]) -> None:
    """(key, value, timestamp ms or None for now) each, partitioned by key: the log's time is
    what a replay closes traces by (``scripts.span_transport.produce`` writes them now)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        for key, value, timestamp_ms in records:
            await producer.send(topic, value, key=key, timestamp_ms=timestamp_ms)
        await producer.flush()
    finally:
        await producer.stop()


def iso(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


async def replay(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """Run `groundedness replay ARGS` (the real command, in a thread: it runs its own loop)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return await asyncio.wait_for(asyncio.to_thread(main, ["replay", *args]), timeout=120)


def read_summary(path: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads(path.read_text())
    return summary


async def test_a_trace_straddling_to_is_judged_whole_once_and_as_the_live_worker_judged_it(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    _, server = fake_judge
    topics = Topics.fresh("replay-spans-live")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    env = worker_env(topics.env(kafka), server.url, TRACES_FORMAT="otlp_proto",
                     TRACE_QUIET_SECONDS="1.5", TRACE_MAX_WAIT_SECONDS="4")
    straddling, rootless, after = rag("Who wrote Dune?"), rag("Who wrote Emma?"), rag("Q3?")
    started_ms = time.time() * 1000 - 1_000

    # The live worker reads the spans as they are written: the straddling trace's first
    # records, a garbage record and a trace whose root never comes; then, past --to, the
    # rest of the straddling trace (with its root) and a trace that starts after --to.
    async with in_process_worker(env, monkeypatch):
        await produce(kafka, topics.traces, [
            (straddling.key, otlp_proto(straddling.spans[:3]), None),
            (b"garbage", GARBAGE, None),
            (rootless.key, otlp_proto(rootless.spans[:-1]), None),
        ])
        await asyncio.sleep(0.3)
        to_ms = time.time() * 1000
        await asyncio.sleep(0.3)
        await produce(kafka, topics.traces, [
            (straddling.key, otlp_proto(straddling.spans[3:]), None),
            (after.key, otlp_proto(after.spans), None),
        ])
        live = verdicts_by_trace(await read_all(kafka, topics.verdicts, at_least=3,
                                                timeout_s=60, settle_s=0.5))
    assert set(live) == {straddling.trace_id, rootless.trace_id, after.trace_id}

    summary_path = tmp_path / "summary.json"
    code = await replay(env, monkeypatch, "--from", iso(started_ms), "--to", iso(to_ms),
                        "--summary-json", str(summary_path))

    assert code == 0
    both = verdicts_by_trace(await read_all(kafka, topics.verdicts, at_least=5, settle_s=1.0))
    assert {t: len(v) for t, v in both.items()} == {
        straddling.trace_id: 2, rootless.trace_id: 2, after.trace_id: 1}
    for trace in (straddling, rootless):
        live_verdict, replayed = both[trace.trace_id]
        assert {f: replayed[f] for f in SAME_AS_LIVE} == {f: live_verdict[f] for f in SAME_AS_LIVE}
    assert both[straddling.trace_id][1]["assembly"] == {
        "spans": 3, "root_seen": True, "closed_by": "quiet", "capped": 0}
    assert both[rootless.trace_id][1]["assembly"] == {
        "spans": 3, "root_seen": False, "closed_by": "max_wait", "capped": 0}
    dead = await read_all(kafka, topics.dlq, at_least=2, settle_s=1.0)
    assert [r.value for r in dead] == [GARBAGE, GARBAGE], "live, then the replay"

    summary = read_summary(summary_path)
    assert summary["complete"] is True
    assert {k: summary[k] for k in ("records", "pass", "dead_lettered", "traces",
                                    "closed_by", "spans")} == {
        "records": 3, "pass": 2, "dead_lettered": 1, "traces": 2,
        "closed_by": {"quiet": 1, "max_wait": 1},
        "spans": {"kept": 6, "dropped": 5, "late": 0},
    }
    assert summary["records_after_to"] >= 1, "the straddling trace's rest, read past --to"


@pytest.mark.parametrize("encoding", ["otlp_json", "otlp_proto"])
async def test_the_dry_run_counts_what_the_replay_then_judges_by_the_logs_time(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path, encoding: SpanEncoding,
) -> None:
    judge, server = fake_judge
    topics = Topics.fresh(f"replay-spans-{encoding}")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    # Written hours ago, seconds apart (the records' own timestamps): the replay reads them
    # in a moment, and still closes each trace as the log's time says.
    base = (int(time.time() * 1000) - 3 * HOUR_MS) // 1000 * 1000
    straddling, rootless, after = rag("Who wrote Dune?"), rag("Who wrote Emma?"), rag("Q3?")
    index, empty = indexing(), answered("   ")

    def at(trace: Trace, spans: list[ReadableSpan], seconds: int) -> tuple[bytes, bytes, int]:
        return trace.key, encode(spans, encoding), base + seconds * 1000

    await produce(kafka, topics.traces, [
        at(straddling, straddling.spans[:3], 0),
        (b"garbage", GARBAGE, base + 1_000),
        at(rootless, rootless.spans[:-1], 2),
        at(index, index.spans, 3),
        at(empty, empty.spans, 4),
        # --to is at +10 s
        at(straddling, straddling.spans[3:], 11),
        at(after, after.spans, 12),
        (b"garbage", GARBAGE, base + 13_000),
        at(rootless, indexing().spans, 200),  # a record on its partition: 198 s of quiet
    ])
    env = worker_env(topics.env(kafka), server.url, TRACES_FORMAT=encoding,
                     TRACE_QUIET_SECONDS="10", TRACE_MAX_WAIT_SECONDS="60")
    window = ("--from", iso(base), "--to", iso(base + 10_000))

    dry_path = tmp_path / "dry.json"
    assert await replay(env, monkeypatch, *window, "--dry-run", "--summary-json",
                        str(dry_path)) == 0
    dry = read_summary(dry_path)
    assert judge.count() == 0
    assert await read_all(kafka, topics.verdicts, settle_s=1.0, timeout_s=3) == []
    assert await read_all(kafka, topics.dlq, settle_s=1.0, timeout_s=3) == []
    counted = {
        "records": 5, "would_judge": 2, "skipped": 1, "no_candidate": 1, "dead_lettered": 1,
        "traces": 4, "closed_by": {"quiet": 3, "max_wait": 1}, "closed_early": 0,
        "open_at_end": 0, "spans": {"kept": 10, "dropped": 5, "late": 0},
    }
    assert {k: dry[k] for k in counted} == counted
    assert dry["estimated_tokens"] > 2 * 400  # each request carries the answer allowance

    replay_path = tmp_path / "replay.json"
    assert await replay(env, monkeypatch, *window, "--summary-json", str(replay_path)) == 0
    verdicts = verdicts_by_trace(await read_all(kafka, topics.verdicts, at_least=2,
                                                settle_s=1.0))
    assert {t: len(v) for t, v in verdicts.items()} == {
        straddling.trace_id: 1, rootless.trace_id: 1}
    assert [v["assembly"] for v in verdicts[rootless.trace_id]] == [
        {"spans": 3, "root_seen": False, "closed_by": "max_wait", "capped": 0}]
    assert [r.value for r in await read_all(kafka, topics.dlq, at_least=1, settle_s=1.0)] == [
        GARBAGE]
    judged = read_summary(replay_path)
    assert {k: judged[k] for k in counted if k != "would_judge"} == {
        k: v for k, v in counted.items() if k != "would_judge"}
    assert (judged["pass"], judged["complete"]) == (2, True)


async def test_a_trace_begun_before_from_is_judged_whole_by_the_window_of_its_first_span(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Two adjacent windows: the trace starts in the first and ends in the second. Judged
    from its tail by the second, its verdict (the same verdict id) would replace the whole
    trace's."""
    _, server = fake_judge
    topics = Topics.fresh("replay-spans-from")
    await create_topics(kafka, topics, partitions=1)
    base = (int(time.time() * 1000) - HOUR_MS) // 1000 * 1000
    straddling = rag("Who wrote Dune?")
    await produce(kafka, topics.traces, [
        (straddling.key, otlp_proto(straddling.spans[:3]), base),  # DB, DB, retriever
        (straddling.key, otlp_proto(straddling.spans[3:]), base + 2_000),  # LLM, chain, root
    ])
    env = worker_env(topics.env(kafka), server.url, TRACES_FORMAT="otlp_proto",
                     TRACE_QUIET_SECONDS="10", TRACE_MAX_WAIT_SECONDS="60")

    later = tmp_path / "later.json"
    assert await replay(env, monkeypatch, "--from", iso(base + 1_000), "--to", iso(base + 3_000),
                        "--summary-json", str(later)) == 0
    summary = read_summary(later)
    assert {k: summary[k] for k in ("records", "traces", "spans", "dead_lettered")} == {
        "records": 1, "traces": 0, "spans": {"kept": 0, "dropped": 0, "late": 0},
        "dead_lettered": 0}, "the lead-in's record is read, not the window's"
    assert await read_all(kafka, topics.verdicts, settle_s=1.0, timeout_s=3) == []

    assert await replay(env, monkeypatch, "--from", iso(base - 1_000), "--to", iso(base + 1_000),
                        "--summary-json", str(tmp_path / "earlier.json")) == 0
    verdicts = verdicts_by_trace(await read_all(kafka, topics.verdicts, at_least=1,
                                                settle_s=1.0))
    assert [v["assembly"]["spans"] for v in verdicts[straddling.trace_id]] == [3]


async def test_past_max_open_traces_the_dry_run_counts_what_the_replay_judges(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Traces 10 ms apart, each in two records 5 s apart: in the log's time some 500 are open
    at once, far past ``MAX_OPEN_TRACES``, so the replay closes the next due early. The dry
    run closes the same ones (the same pipeline), however the two happened to fetch."""
    _, server = fake_judge
    topics = Topics.fresh("replay-spans-limit")
    await create_topics(kafka, topics, partitions=1)
    base = (int(time.time() * 1000) - HOUR_MS) // 1000 * 1000
    records = []
    for n in range(60):
        trace = rag(f"Q{n}?")
        records += [(trace.key, otlp_proto(trace.spans[:3]), base + 10 * n),
                    (trace.key, otlp_proto(trace.spans[3:]), base + 10 * n + 5_000)]
    await produce(kafka, topics.traces, sorted(records, key=lambda r: r[2] or 0))
    env = worker_env(topics.env(kafka), server.url, TRACES_FORMAT="otlp_proto",
                     TRACE_QUIET_SECONDS="10", TRACE_MAX_WAIT_SECONDS="60", MAX_OPEN_TRACES="10")
    window = ("--from", iso(base), "--to", iso(base + 20_000))

    dry_path, replay_path = tmp_path / "dry.json", tmp_path / "replay.json"
    assert await replay(env, monkeypatch, *window, "--dry-run", "--summary-json",
                        str(dry_path)) == 0
    assert await replay(env, monkeypatch, *window, "--summary-json", str(replay_path)) == 0
    dry, judged = read_summary(dry_path), read_summary(replay_path)

    same = ("records", "skipped", "dead_lettered", "traces", "no_candidate", "closed_by",
            "closed_early", "open_at_end", "spans")
    assert {k: dry[k] for k in same} == {k: judged[k] for k in same}
    assert dry["closed_early"] > 0
    assert dry["would_judge"] == judged["pass"] + judged["fail"] + judged["error"]


async def test_a_trace_still_being_written_when_the_replay_starts_is_left_to_the_live_worker(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Without ``--to``, the window ends at the topic's end: a trace whose root has not come
    and whose max wait has not passed is in flight. Judged from its spans so far, its verdict
    would carry the id the live worker gives the whole trace."""
    judge, server = fake_judge
    topics = Topics.fresh("replay-spans-tail")
    await create_topics(kafka, topics, partitions=1)
    writing = rag("Who wrote Dune?")
    await produce(kafka, topics.traces, [(writing.key, otlp_proto(writing.spans[:4]), None)])
    env = worker_env(topics.env(kafka), server.url, TRACES_FORMAT="otlp_proto",
                     TRACE_QUIET_SECONDS="10", TRACE_MAX_WAIT_SECONDS="120")
    summary_path = tmp_path / "summary.json"

    assert await replay(env, monkeypatch, "--from", iso(time.time() * 1000 - 60_000),
                        "--summary-json", str(summary_path)) == 0
    summary = read_summary(summary_path)
    assert {k: summary[k] for k in ("complete", "records", "traces", "open_at_end")} == {
        "complete": True, "records": 1, "traces": 0, "open_at_end": 1}
    assert judge.count() == 0
    assert await read_all(kafka, topics.verdicts, settle_s=1.0, timeout_s=3) == []


async def test_a_sigterm_mid_replay_exits_130_with_an_incomplete_summary(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
) -> None:
    judge, server = fake_judge
    topics = Topics.fresh("replay-spans-stop")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    hung, whole = answered("Frank Herbert. [[hang]]"), rag("Who wrote Dune?")
    written_ms = int(time.time() * 1000) - HOUR_MS // 2  # long quiet when the replay starts
    await produce(kafka, topics.traces, [(t.key, otlp_proto(t.spans), written_ms)
                                         for t in (hung, whole)])
    committed_before = await group_offsets(kafka, topics.group, topics.traces)
    env = {**os.environ, **worker_env(topics.env(kafka), server.url,
                                      TRACES_FORMAT="otlp_proto", DRAIN_TIMEOUT_SECONDS="1",
                                      JUDGE_TIMEOUT_SECONDS="60")}
    summary_path = tmp_path / "summary.json"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "consumer.cli", "replay", "--from", iso(time.time() * 1000
                                                                        - HOUR_MS),
        "--summary-json", str(summary_path), env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        await until(lambda: judge.count("[[hang]]") >= 1, timeout_s=60, interval_s=0.1)
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

    assert process.returncode == 130, stderr.decode()[-2_000:]
    summary = read_summary(summary_path)
    assert summary["complete"] is False
    assert summary["traces"] == 2, "both closed; one was still being judged"
    # Nothing is lost: the replay commits nothing, so running it again redoes the window.
    assert await group_offsets(kafka, topics.group, topics.traces) == committed_before


async def test_each_assembled_trace_gets_a_verdict_per_rule_that_applies_and_counts_once(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """RULES=groundedness,missing_citation: a RAG trace gets both verdicts, a trace without
    retrieved documents only groundedness's. The dry run runs the citation rule for real and
    only estimates the judge's calls; both summaries count records, not verdicts."""
    judge, server = fake_judge
    topics = Topics.fresh("replay-spans-rules")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    base = (int(time.time() * 1000) - HOUR_MS) // 1000 * 1000
    cited, also_cited, bare = rag("Who wrote Dune?"), rag("Who wrote Emma?"), answered("Yes.")
    await produce(kafka, topics.traces, [
        *((t.key, otlp_proto(t.spans), base + n * 1_000)
          for n, t in enumerate((cited, also_cited, bare))),
        (b"garbage", GARBAGE, base + 3_000),
    ])
    env = worker_env(topics.env(kafka), server.url, TRACES_FORMAT="otlp_proto",
                     TRACE_QUIET_SECONDS="10", TRACE_MAX_WAIT_SECONDS="60",
                     RULES="groundedness,missing_citation")
    window = ("--from", iso(base - 1_000))

    dry_path, replay_path = tmp_path / "dry.json", tmp_path / "replay.json"
    assert await replay(env, monkeypatch, *window, "--dry-run", "--summary-json",
                        str(dry_path)) == 0
    assert judge.count() == 0
    dry = read_summary(dry_path)
    assert dry["rules"] == {"groundedness": {"would_judge": 3},
                            "missing_citation": {"pass": 2, "fail": 0, "error": 0}}

    assert await replay(env, monkeypatch, *window, "--summary-json", str(replay_path)) == 0
    records = await read_all(kafka, topics.verdicts, at_least=5, settle_s=1.0)
    found = sorted((json.loads(r.value)["trace_id"], json.loads(r.value)["rule"])
                   for r in records)
    assert found == sorted([(cited.trace_id, "groundedness"), (cited.trace_id, "missing_citation"),
                            (also_cited.trace_id, "groundedness"),
                            (also_cited.trace_id, "missing_citation"),
                            (bare.trace_id, "groundedness")])
    judged = read_summary(replay_path)
    assert judged["rules"] == {"groundedness": {"pass": 3, "fail": 0, "error": 0},
                               "missing_citation": {"pass": 2, "fail": 0, "error": 0}}
    same = ("records", "traces", "skipped", "not_applicable", "dead_lettered")
    assert {k: judged[k] for k in same} == {k: dry[k] for k in same} == {
        "records": 4, "traces": 3, "skipped": 0, "not_applicable": 0, "dead_lettered": 1}
    assert judged["pass"] == 5
