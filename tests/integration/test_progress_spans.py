"""Span input's progress through the real worker and a real broker: the commit keeps moving
under overlapping traffic, and no pause, restart, late span or dead letter makes a trace
judged twice, from a part of its spans, or not at all.

Each RAG request's spans arrive in two records keyed by its trace id (the retriever first,
then the LLM call, the chain and the root), with requests overlapping, as real exporters
write them (``tests/support/span_traffic.py``). Workers are ``groundedness run`` processes.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx2
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from prometheus_client.parser import text_string_to_metric_families

from consumer.localjudge.server import JudgeServer
from tests.support.fake_judge import ScriptedJudge
from tests.support.ports import free_port
from tests.support.span_traffic import (
    CommitWatch,
    Request,
    Requests,
    SpanRecord,
    SteadyTraffic,
    head,
    interleave,
    produce_records,
    spread_ms,
    tail,
)
from tests.support.streams import Topics, create_topics, group_offsets, read_all
from tests.support.workers import (
    REPO_ROOT,
    VerdictCollector,
    Worker,
    WorkerPool,
    wait_committed,
    worker_env,
)

pytestmark = pytest.mark.integration

QUIET_S = 1.0
MAX_WAIT_S = 5.0
# How far behind the traffic the commit (and a verdict) may fall: a trace closes at most
# max_wait after its first span, a quiet one sooner, and is then judged and committed.
LAG_BOUND_S = QUIET_S + MAX_WAIT_S + 5.0
TRAFFIC_S = 20.0
RECORD_EVERY_S = 0.04  # a request every 80 ms, two open at once
DEFAULT_MAX_MESSAGE_BYTES = 1_048_588  # the broker's default for a topic


def span_env(kafka: str, topics: Topics, server: JudgeServer, **overrides: str) -> dict[str, str]:
    """A span worker of these topics: OTLP protobuf, short assembly times, info logs."""
    defaults = {
        "TRACES_FORMAT": "otlp_proto", "TRACE_QUIET_SECONDS": str(QUIET_S),
        "TRACE_MAX_WAIT_SECONDS": str(MAX_WAIT_S), "LOG_LEVEL": "info",
        # The venv's entry point imports the checkout it was installed from: run this one's.
        "PYTHONPATH": str(REPO_ROOT),
    }
    return worker_env(topics.env(kafka), server.url, **(defaults | overrides))


async def started(pool: WorkerPool, env: dict[str, str], name: str | None = None) -> Worker:
    """A worker that owns its partitions (so traffic written from now on is read live)."""
    worker = await pool.start(env, name=name)
    assert await wait_event(worker, "partitions_assigned", 30,
                            lambda e: bool(e.get("partitions"))), worker.log()
    return worker


async def wait_event(worker: Worker, name: str, timeout_s: float,
                     matches: Any = None) -> dict[str, Any] | None:
    """The first log event ``name`` (for which ``matches(event)``), waiting for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        for event in worker.events():
            if event.get("event") == name and (matches is None or matches(event)):
                return event
        if time.monotonic() >= deadline or not worker.running:
            return None
        await asyncio.sleep(0.1)


async def metric(http: httpx2.AsyncClient, port: int, name: str) -> float | None:
    """A sample's value from the worker's ``/metrics`` (the sum over its labels)."""
    text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    values = [sample.value for family in text_string_to_metric_families(text)
              for sample in family.samples if sample.name == name]
    return sum(values) if values else None


def per_trace(verdicts: list[dict[str, Any]]) -> Counter[str]:
    """Verdict records per trace id (records counted, not distinct ids)."""
    return Counter(v["trace_id"] for v in verdicts)


def incomplete(verdicts: list[dict[str, Any]], requests: list[Request]) -> list[str]:
    """The verdicts not judged on their whole request (every GenAI span, its documents)."""
    whole = {r.trace_id: r.genai_spans for r in requests}
    found = []
    for v in verdicts:
        spans = (v.get("assembly") or {}).get("spans")
        documents = v["truncation"]["documents_received"]
        if (spans != whole.get(v["trace_id"]) or v.get("context_source") != "retrieval"
                or documents < 1):
            found.append(f"{v['trace_id'][:8]}: spans {spans}, context "
                         f"{v.get('context_source')}, {documents} documents, "
                         f"closed_by {(v.get('assembly') or {}).get('closed_by')}")
    return found


def twice(counts: Counter[str], trace_ids: set[str]) -> dict[str, int]:
    """The traces without exactly one verdict record, and how many they have."""
    return {t[:8]: counts[t] for t in sorted(trace_ids) if counts[t] != 1}


# -- 1. the commit keeps moving under steady overlapping traffic -----------------------------


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
async def test_the_commit_and_the_verdicts_keep_up_with_steady_overlapping_traffic(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path, delivery: str,
) -> None:
    """Under steady overlapping traffic the commit stays young and verdicts keep coming."""
    # Overlapping requests chain each trace's range of records into the next one's: a
    # watermark that waits for a gap between them never moves while the traffic lasts.
    _, server = fake_judge
    topics = Topics.fresh(f"steady-{delivery}")
    await create_topics(kafka, topics, partitions=1)
    env = span_env(kafka, topics, server, DELIVERY=delivery)

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        worker = await started(pool, env)
        async with CommitWatch(kafka, topics.group, topics.traces) as watch, \
                SteadyTraffic(kafka, topics.traces, interval_s=RECORD_EVERY_S) as traffic:
            began = time.monotonic()
            await asyncio.sleep(TRAFFIC_S)
            await traffic.stop()
            during = len(out.verdicts)
        assert await out.wait_for(traffic.trace_ids, timeout_s=30), worker.log()[-3000:]
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 20)
        await asyncio.sleep(1.0)  # a second verdict of any trace has time to arrive
        assert await worker.terminate() == 0

    stopped = traffic.stopped_at
    assert stopped is not None
    ages = [(at - began, age) for at, age in watch.ages_s(traffic.sent_at) if at <= stopped]
    first_seen: dict[str, float] = {}
    for verdict, at in zip(out.verdicts, out.arrived_at, strict=True):
        first_seen.setdefault(verdict["trace_id"], at)
    delays = {t: first_seen[t] - sent for t, sent in traffic.tail_sent_at.items()}
    oldest = max(ages, key=lambda sample: sample[1])
    print(f"\nsteady traffic ({delivery}): {len(traffic.requests)} requests over "
          f"{TRAFFIC_S:.0f} s, {during} verdicts read during it; committed record's age "
          f"max {oldest[1]:.1f} s (at {oldest[0]:.0f} s), samples "
          f"{[round(age, 1) for _, age in ages]}; verdict delay max "
          f"{max(delays.values()):.1f} s")
    assert during >= len(traffic.requests) // 2, (
        f"verdicts flow while the traffic does: {during} read during it")
    assert max(delays.values()) <= LAG_BOUND_S, "every verdict readable soon after its trace"
    assert len(ages) >= TRAFFIC_S - 3, "sampled about every second"
    assert oldest[1] <= LAG_BOUND_S, (
        f"the commit fell {oldest[1]:.1f} s behind the traffic at {oldest[0]:.0f} s "
        f"(bound {LAG_BOUND_S} s)")
    assert twice(per_trace(out.verdicts), traffic.trace_ids) == {}, "one verdict per trace"
    assert incomplete(out.verdicts, traffic.requests) == []
    assert committed == ends


# -- 2. a pause, or a backlog, longer than the max wait --------------------------------------


async def test_a_judge_outage_longer_than_max_wait_closes_no_trace_without_its_unread_records(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    http: httpx2.AsyncClient,
) -> None:
    """Traces whose second record arrives while the judge is down are judged whole later."""
    # Their first records are read while the judge answers; then it goes down for everyone,
    # the circuit opens and fetching pauses, for longer than their max wait: they must not
    # close on their first record alone (the time of records not yet read does not pass).
    judge, server = fake_judge
    topics = Topics.fresh("outage-spans")
    await create_topics(kafka, topics, partitions=1)
    port = free_port()
    max_wait_s = 8.0
    env = span_env(kafka, topics, server, TRACE_MAX_WAIT_SECONDS=str(max_wait_s),
                   JUDGE_MAX_CONCURRENCY="4", JUDGE_TIMEOUT_SECONDS="5", HEALTH_PORT=str(port))
    factory = Requests()
    across = factory.many(4)  # first record before the pause, second during it
    before = factory.many(6)  # whole, after the first records: their failing calls trip it
    requests = before + across

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        worker = await started(pool, env)
        heads_at = time.monotonic()
        await produce_records(kafka, topics.traces, [head(r) for r in across])
        for _ in range(200):  # the worker holds them open
            if await metric(http, port, "groundedness_open_traces") == len(across):
                break
            await asyncio.sleep(0.05)
        judge.outage = 503
        await produce_records(kafka, topics.traces, interleave(before))
        paused = await wait_event(worker, "partitions_paused", 30,
                                  lambda e: e.get("judge_down") is True)
        assert paused is not None, worker.log()[-3000:]
        assert time.monotonic() - heads_at < max_wait_s - 1, "paused within their max wait"
        await produce_records(kafka, topics.traces, [tail(r) for r in across])
        await asyncio.sleep(max_wait_s + 3.0)  # paused past every open trace's max wait
        judge.outage = None
        judged = await out.wait_for({r.trace_id for r in requests}, timeout_s=20)
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 10)
        await asyncio.sleep(1.0)
        late = await metric(http, port, "groundedness_late_spans_total")
        assert await worker.terminate() == 0

    counts = per_trace(out.verdicts)
    print(f"\noutage across max wait: {len(out.verdicts)} verdicts for {len(requests)} "
          f"traces ({sum(counts[r.trace_id] == 0 for r in across)} of the {len(across)} "
          f"spanning the pause without one), late spans {late}")
    assert judged, f"traces without a verdict: {twice(counts, {r.trace_id for r in requests})}"
    assert twice(counts, {r.trace_id for r in requests}) == {}
    assert incomplete(out.verdicts, requests) == []
    assert late == 0, "no record of a trace came after it closed"
    assert committed == ends


async def test_a_backlog_longer_than_max_wait_is_judged_whole(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    http: httpx2.AsyncClient,
) -> None:
    """A 30 s backlog, read by a worker with a 3 s max wait and a slow judge: every trace whole."""
    # MAX_OPEN_TRACES and the judge's pace pause the reading for longer than the max wait,
    # with the tails of the last traces read still unread.
    judge, server = fake_judge
    judge.latency_s = 0.6
    topics = Topics.fresh("backlog-spans")
    await create_topics(kafka, topics, partitions=1)
    requests = Requests().many(80)
    records = interleave(requests)
    await produce_records(kafka, topics.traces, records,
                          timestamps_ms=spread_ms(len(records), 30.0))
    port = free_port()
    env = span_env(kafka, topics, server, TRACE_MAX_WAIT_SECONDS="3", MAX_OPEN_TRACES="20",
                   JUDGE_MAX_CONCURRENCY="4", HEALTH_PORT=str(port))

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        worker = await pool.start(env)
        judged = await out.wait_for({r.trace_id for r in requests}, timeout_s=25)
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 10)
        await asyncio.sleep(1.0)
        late = await metric(http, port, "groundedness_late_spans_total")
        assert await worker.terminate() == 0

    counts = per_trace(out.verdicts)
    print(f"\nbacklog: {len(out.verdicts)} verdicts for {len(requests)} traces, "
          f"{len(incomplete(out.verdicts, requests))} not whole, late spans {late}")
    assert judged, f"traces without a verdict: {twice(counts, {r.trace_id for r in requests})}"
    assert twice(counts, {r.trace_id for r in requests}) == {}
    assert incomplete(out.verdicts, requests) == []
    assert late == 0
    assert committed == ends


# -- 3. a graceful stop mid-stream -----------------------------------------------------------


async def test_a_graceful_stop_in_overlapping_traffic_publishes_no_trace_twice(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
) -> None:
    """A SIGTERM in overlapping traffic, another worker after it: one verdict per trace."""
    _, server = fake_judge
    topics = Topics.fresh("sigterm-spans")
    await create_topics(kafka, topics, partitions=1)
    env = span_env(kafka, topics, server, DELIVERY="at_least_once")

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        first = await started(pool, env)
        async with SteadyTraffic(kafka, topics.traces, interval_s=RECORD_EVERY_S) as traffic:
            await asyncio.sleep(7.0)
            assert await first.terminate() == 0
            at_stop = len(out.verdicts)
            committed_at_stop, _ = await group_offsets(kafka, topics.group, topics.traces)
            second = await started(pool, env, name="after-sigterm")
            await asyncio.sleep(7.0)
            await traffic.stop()
        assert await out.wait_for(traffic.trace_ids, timeout_s=30), second.log()[-3000:]
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 20)
        await asyncio.sleep(2.0)  # a verdict published twice has time to arrive
        assert await second.terminate() == 0

    counts = per_trace(out.verdicts)
    repeated = twice(counts, traffic.trace_ids)
    print(f"\ngraceful stop mid-stream: {len(traffic.requests)} requests, {at_stop} verdicts "
          f"before the SIGTERM (committed {committed_at_stop}), {len(out.verdicts)} in all; "
          f"{len(repeated)} traces without exactly one")
    assert repeated == {}, "a trace finished before the stop was published again"
    assert len(out.verdicts) == len(traffic.requests)
    assert incomplete(out.verdicts, traffic.requests) == []
    assert committed == ends


# -- 4. a late span of a judged trace, then a restart ----------------------------------------


async def test_a_late_span_of_a_judged_trace_gives_no_second_verdict_after_a_restart(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    http: httpx2.AsyncClient,
) -> None:
    """T's late LLM span, held below the watermark by an open trace: no new verdict of T."""
    # T judged; its late span arrives behind an open trace's first record, which keeps the
    # watermark below it; a SIGTERM and a restart re-read the late span.
    _, server = fake_judge
    topics = Topics.fresh("late-spans")
    await create_topics(kafka, topics, partitions=1)
    port = free_port()
    env = span_env(kafka, topics, server, TRACE_MAX_WAIT_SECONDS="6", HEALTH_PORT=str(port))
    factory = Requests()
    judged, still_open = factory.make("Who wrote Dune?"), factory.make("Who wrote Emma?")

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        first = await started(pool, env)
        await produce_records(kafka, topics.traces, [head(judged), tail(judged)])
        assert await out.wait_for({judged.trace_id}, timeout_s=20), first.log()[-3000:]
        await wait_committed(kafka, topics.group, topics.traces, 10)
        # The open trace's first record, then T's late span: the watermark stays below it.
        await produce_records(kafka, topics.traces,
                              [head(still_open), factory.late_llm_span(judged)])
        deadline = time.monotonic() + 10
        while (await metric(http, port, "groundedness_open_traces") or 0) < 1:
            assert time.monotonic() < deadline, first.log()[-3000:]
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # the late record is read with it
        assert await first.terminate() == 0
        await produce_records(kafka, topics.traces, [tail(still_open)])
        second = await started(pool, env, name="after-restart")
        assert await out.wait_for({still_open.trace_id}, timeout_s=20), second.log()[-3000:]
        await asyncio.sleep(6 + 3.0)  # past the max wait of a trace the late span reopened
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 10)
        assert await second.terminate() == 0

    of_t = [v for v in out.verdicts if v["trace_id"] == judged.trace_id]
    print(f"\nlate span after a restart: {len(of_t)} verdict records for T: "
          f"{[(v.get('context_source'), (v.get('assembly') or {}).get('spans')) for v in of_t]}")
    assert len(of_t) == 1, f"T judged again: {incomplete(of_t, [judged])}"
    assert incomplete(of_t, [judged]) == [], "T's one verdict is its whole one"
    assert per_trace(out.verdicts)[still_open.trace_id] == 1
    assert incomplete(out.verdicts, [judged, still_open]) == []
    assert committed == ends


# -- 5. a dead letter inside a trace ---------------------------------------------------------


async def test_a_dead_letter_inside_a_trace_gives_no_verdict_of_its_tail_after_a_restart(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
) -> None:
    """An undecodable record between T's two, slow to dead-letter: T judged once, whole."""
    # T's records at a < c, the undecodable one at b: its dead letter is refused by the DLQ
    # as too large, and retried, until the test lifts the limit after a SIGTERM; a restart.
    _, server = fake_judge
    topics = Topics.fresh("dead-inside")
    await create_topics_with_a_stuck_dlq(kafka, topics)
    env = span_env(kafka, topics, server, TRACE_MAX_WAIT_SECONDS="10",
                   DRAIN_TIMEOUT_SECONDS="2")
    factory = Requests()
    trace = factory.make()
    garbage = SpanRecord(trace.trace_id, "head", b"\xff\x00 not an OTLP request \xfe")
    # Another request overlapping T, so the records around b are an ordinary stream's.
    other = factory.make()
    records = [head(trace), head(other), garbage, tail(trace), tail(other)]

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        first = await started(pool, env)
        offsets = await produce_records(kafka, topics.traces, records)
        assert await out.wait_for({trace.trace_id, other.trace_id}, timeout_s=20), \
            first.log()[-3000:]
        await asyncio.sleep(1.0)  # the watermark is committed as far as it goes
        committed_before, _ = await group_offsets(kafka, topics.group, topics.traces)
        stopping = asyncio.create_task(first.terminate())
        # The drain gives up on the dead letter; then let the producer's last send through.
        await first.wait_for_log("drain_timed_out", 15)
        await set_max_message_bytes(kafka, topics.dlq, DEFAULT_MAX_MESSAGE_BYTES)
        assert await stopping == 0
        second = await started(pool, env, name="after-restart")
        dead = await read_all(kafka, topics.dlq, at_least=1, timeout_s=20)
        await asyncio.sleep(QUIET_S + 4.0)  # a tail reassembled alone would close by now
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 10)
        assert await second.terminate() == 0

    of_t = [v for v in out.verdicts if v["trace_id"] == trace.trace_id]
    print(f"\ndead letter inside a trace (offsets {offsets}, committed before the stop "
          f"{committed_before[0]}): {len(of_t)} verdict records for T: "
          f"{[(v.get('context_source'), (v.get('assembly') or {}).get('spans')) for v in of_t]}"
          f", {len(dead)} dead letters")
    assert dead, "the undecodable record was dead-lettered"
    assert len(of_t) == 1, f"T judged again: {incomplete(of_t, [trace])}"
    assert incomplete(of_t, [trace]) == []
    assert per_trace(out.verdicts)[other.trace_id] == 1
    assert committed == ends


async def create_topics_with_a_stuck_dlq(kafka: str, topics: Topics) -> None:
    """One traces partition, and a DLQ that refuses every record until it is let be."""
    # max.message.bytes of a few bytes: the worker's dead letter is refused and retried,
    # unacknowledged, until ``set_max_message_bytes`` lifts the limit.
    await create_topics(kafka, Topics(topics.traces, topics.verdicts, f"{topics.dlq}-unused",
                                      topics.group), partitions=1)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topics.dlq, num_partitions=1, replication_factor=1,
                                            topic_configs={"max.message.bytes": "50"})])
    finally:
        await admin.close()


async def set_max_message_bytes(kafka: str, topic: str, limit: int) -> None:
    """Set the topic's ``max.message.bytes``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    await admin.start()
    try:
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                  {"max.message.bytes": str(limit)})])
    finally:
        await admin.close()
