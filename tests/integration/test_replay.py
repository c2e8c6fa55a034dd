"""`groundedness replay` through the real command, a real broker and the fake judge over HTTP."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from consumer.cli import main
from consumer.localjudge.server import JudgeServer
from tests.support.fake_judge import ScriptedJudge
from tests.support.streams import (
    Topics,
    create_topics,
    group_offsets,
    produce,
    read_all,
    trace,
    verdicts_by_trace,
)
from tests.support.workers import worker_env

pytestmark = pytest.mark.integration

HOUR_MS = 3_600_000
PARTITIONS = 3


@dataclass(frozen=True)
class Seeded:
    """A traces topic with three windows an hour apart, starting at ``base_ms``."""

    topics: Topics
    base_ms: int
    judged: dict[str, set[str]]  # window -> trace ids that get a verdict

    def iso(self, offset_ms: int) -> str:
        return datetime.fromtimestamp((self.base_ms + offset_ms) / 1000, UTC).isoformat()


def window_values(name: str) -> list[tuple[str | None, bytes]]:
    """(trace id that gets a verdict or None, value) for one window."""
    values: list[tuple[str | None, bytes]] = []
    values += [(f"{name}-pass-{i}", trace(f"{name}-pass-{i}", "Supported. [[score=5]]"))
               for i in range(4)]
    values += [(f"{name}-fail-{i}", trace(f"{name}-fail-{i}", "Made up. [[score=1]]"))
               for i in range(3)]
    values.append((f"{name}-error", trace(f"{name}-error", "Rambles. [[garbage]]")))
    values.append((None, trace(f"{name}-empty", "  ")))
    values.append((None, f"not json ({name})".encode()))
    return values


async def seed(bootstrap: str, *, transactional: bool = False) -> Seeded:
    """Produce three windows (early, middle, late), each record with an explicit timestamp."""
    topics = Topics.fresh("replay")
    await create_topics(bootstrap, topics, partitions=PARTITIONS)
    base_ms = (int(time.time() * 1000) - 3 * HOUR_MS) // 1000 * 1000
    txn_id = f"seed-{uuid.uuid4().hex[:8]}" if transactional else None
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, enable_idempotence=True, transactional_id=txn_id
    )
    await producer.start()
    judged: dict[str, set[str]] = {}
    try:
        for number, name in enumerate(("early", "middle", "late")):
            values = window_values(name)
            judged[name] = {trace_id for trace_id, _ in values if trace_id}
            if transactional:
                await producer.begin_transaction()
            for i, (_, value) in enumerate(values):
                await producer.send(
                    topics.traces, value, partition=i % PARTITIONS,
                    timestamp_ms=base_ms + number * HOUR_MS + i * 1000,
                )
            if transactional:
                await producer.commit_transaction()
        await producer.flush()
    finally:
        await producer.stop()
    return Seeded(topics, base_ms, judged)


def environment(seeded: Seeded, bootstrap: str, server: JudgeServer) -> dict[str, str]:
    return worker_env(seeded.topics.env(bootstrap), server.url,
                      JUDGE_MAX_CONCURRENCY="4", JUDGE_TIMEOUT_SECONDS="5")


async def replay(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """Run `groundedness replay ARGS` (the real command, in a thread: it runs its own loop)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return await asyncio.wait_for(asyncio.to_thread(main, ["replay", *args]), timeout=120)


async def commit_group(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in offsets]
        consumer.assign(partitions)
        await consumer.commit({TopicPartition(topic, p): o for p, o in offsets.items()})
    finally:
        await consumer.stop()


def read_summary(path: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads(path.read_text())
    return summary


async def test_replay_judges_exactly_the_window_and_never_moves_the_group(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    judge, server = fake_judge
    seeded = await seed(kafka)
    topics = seeded.topics
    await commit_group(kafka, topics.group, topics.traces, {0: 2, 1: 5, 2: 1})
    committed_before = await group_offsets(kafka, topics.group, topics.traces)
    env = environment(seeded, kafka, server)
    window = ("--from", seeded.iso(HOUR_MS), "--to", seeded.iso(2 * HOUR_MS))

    first = tmp_path / "first.json"
    assert await replay(env, monkeypatch, *window, "--summary-json", str(first)) == 0

    middle = seeded.judged["middle"]
    records = await read_all(kafka, topics.verdicts, at_least=len(middle), settle_s=1.0)
    verdicts = verdicts_by_trace(records)
    assert set(verdicts) == middle, "exactly the middle window's traces are judged"
    assert all(len(v) == 1 for v in verdicts.values())
    assert {c.answer for c in judge.calls if c.answer != "probe"} <= {
        "Supported. [[score=5]]", "Made up. [[score=1]]", "Rambles. [[garbage]]"}
    dead = await read_all(kafka, topics.dlq, at_least=1, settle_s=1.0)
    assert [r.value for r in dead] == [b"not json (middle)"]

    summary = read_summary(first)
    assert {k: summary[k] for k in ("records", "pass", "fail", "error", "skipped",
                                    "dead_lettered")} == {
        "records": 10, "pass": 4, "fail": 3, "error": 1, "skipped": 1, "dead_lettered": 1}
    assert summary["complete"] is True
    assert summary["scores"] == {"0.00": 3, "0.25": 0, "0.50": 0, "0.75": 0, "1.00": 4}
    assert summary["latency_ms_p50"] is not None
    assert summary["latency_ms_p95"] >= summary["latency_ms_p50"]
    assert summary["tokens"]["total"] > 0

    # The same window again: the same verdict ids, overwritten rather than multiplied.
    second = tmp_path / "second.json"
    assert await replay(env, monkeypatch, *window, "--summary-json", str(second)) == 0
    again = await read_all(kafka, topics.verdicts, at_least=2 * len(middle), settle_s=1.0)
    assert len(again) == 2 * len(middle)
    assert {r.key for r in again} == {r.key for r in records}
    assert read_summary(second)["pass"] == 4

    assert await group_offsets(kafka, topics.group, topics.traces) == committed_before


async def test_replay_without_to_stops_at_the_end_seen_at_start_even_after_a_commit_marker(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Transactions leave commit markers: the last offset before the end is no record."""
    _, server = fake_judge
    seeded = await seed(kafka, transactional=True)
    env = environment(seeded, kafka, server)
    summary_path = tmp_path / "summary.json"

    code = await replay(env, monkeypatch, "--from", seeded.iso(HOUR_MS),
                        "--summary-json", str(summary_path))

    assert code == 0
    expected = seeded.judged["middle"] | seeded.judged["late"]
    records = await read_all(kafka, seeded.topics.verdicts, at_least=len(expected), settle_s=1.0)
    assert set(verdicts_by_trace(records)) == expected
    summary = read_summary(summary_path)
    assert (summary["records"], summary["skipped"], summary["dead_lettered"]) == (20, 2, 2)


async def test_dry_run_counts_and_estimates_without_judging_or_publishing(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    judge, server = fake_judge
    seeded = await seed(kafka)
    env = environment(seeded, kafka, server)
    summary_path = tmp_path / "dry.json"

    code = await replay(env, monkeypatch, "--from", seeded.iso(-HOUR_MS), "--dry-run",
                        "--price-per-million-tokens", "2", "--summary-json", str(summary_path))

    assert code == 0
    summary = read_summary(summary_path)
    assert summary["dry_run"] is True
    assert (summary["records"], summary["would_judge"], summary["skipped"],
            summary["dead_lettered"]) == (30, 24, 3, 3)
    assert (summary["pass"], summary["fail"], summary["error"]) == (0, 0, 0)
    assert summary["estimated_tokens"] > 24 * 400  # each request carries the answer allowance
    assert summary["estimated_cost_usd"] == pytest.approx(
        summary["estimated_tokens"] * 2 / 1_000_000, abs=1e-6)
    # Without JUDGE_PRICE_*, the fallback on every token; the low end prices the prompts alone.
    assert summary["prices"] == {"input_per_million": 2.0, "output_per_million": 2.0,
                                 "from": "--price-per-million-tokens"}
    assert summary["estimated_cost_usd_min"] == pytest.approx(
        (summary["estimated_tokens"] - 24 * 400) * 2 / 1_000_000, abs=1e-9)
    assert judge.count() == 0
    assert await read_all(kafka, seeded.topics.verdicts, settle_s=1.0, timeout_s=3) == []
    assert await read_all(kafka, seeded.topics.dlq, settle_s=1.0, timeout_s=3) == []


async def test_an_empty_window_exits_zero_with_a_zero_summary(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    judge, server = fake_judge
    seeded = await seed(kafka)
    env = environment(seeded, kafka, server)
    summary_path = tmp_path / "empty.json"

    # Between the early window's last record (+9 s) and the middle window.
    code = await replay(env, monkeypatch, "--from", seeded.iso(HOUR_MS // 4),
                        "--to", seeded.iso(HOUR_MS // 2), "--summary-json", str(summary_path))

    assert code == 0
    summary = read_summary(summary_path)
    assert summary["complete"] is True
    assert all(summary[key] == 0 for key in ("records", "pass", "fail", "error", "skipped",
                                             "dead_lettered"))
    assert summary["latency_ms_p50"] is None
    assert judge.count() == 0


# -- several rules: RULES=groundedness,missing_citation,answered_without_tool -----------------

DOCS = [{"id": "kb-1", "content": "Refunds are prorated to the day.",
         "metadata": {"title": "Refund Policy"}}]
# trace id -> (its fields, the verdicts it gets with all three rules, by rule)
RULE_TRACES: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
    "full": ({"output": "Prorated to the day [1]. [[score=5]]", "retrieved_documents": DOCS,
              "tools_available": ["search_kb"], "tool_calls": [{"name": "search_kb"}]},
             {"groundedness": "pass", "missing_citation": "pass",
              "answered_without_tool": "pass"}),
    "uncited": ({"output": "Prorated. [[score=1]]", "retrieved_documents": DOCS},
                {"groundedness": "fail", "missing_citation": "fail"}),
    "memory": ({"output": "Sunny. [[score=5]]", "tools_available": ["get_weather"]},
               {"groundedness": "pass", "answered_without_tool": "fail"}),
    "plain": ({"output": "Hello. [[score=5]]"}, {"groundedness": "pass"}),
}


async def seed_rules(bootstrap: str) -> tuple[Topics, str]:
    """The traces of ``RULE_TRACES``, one with an empty answer and a garbage record, all in
    the hour before now; and the ``--from`` before them."""
    topics = Topics.fresh("replay-rules")
    await create_topics(bootstrap, topics, partitions=PARTITIONS)
    base_ms = int(time.time() * 1000) - HOUR_MS
    values = [trace(trace_id, **fields) for trace_id, (fields, _) in RULE_TRACES.items()]
    values += [trace("empty", "  ", retrieved_documents=DOCS), b"not json"]
    await produce(bootstrap, topics.traces, values, first_timestamp_ms=base_ms)
    return topics, datetime.fromtimestamp((base_ms - 1000) / 1000, UTC).isoformat()


async def test_a_trace_with_three_verdicts_is_one_record_in_the_summary(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    _, server = fake_judge
    topics, start = await seed_rules(kafka)
    env = worker_env(topics.env(kafka), server.url, JUDGE_MAX_CONCURRENCY="4",
                     RULES="groundedness,missing_citation,answered_without_tool")
    summary_path = tmp_path / "rules.json"

    assert await replay(env, monkeypatch, "--from", start,
                        "--summary-json", str(summary_path)) == 0

    expected = {(trace_id, rule): verdict for trace_id, (_, verdicts) in RULE_TRACES.items()
                for rule, verdict in verdicts.items()}
    records = await read_all(kafka, topics.verdicts, at_least=len(expected), settle_s=1.0)
    published = [json.loads(r.value) for r in records]
    assert {(v["trace_id"], v["rule"]): v["verdict"] for v in published} == expected
    assert len(published) == len(expected) == len({r.key for r in records})
    summary = read_summary(summary_path)
    # Six records: four traces with 3, 2, 2 and 1 verdicts, an empty answer, a garbage record
    # (summing the outcomes, which count each verdict, made them ten).
    assert {k: summary[k] for k in ("records", "pass", "fail", "error", "skipped",
                                    "not_applicable", "dead_lettered")} == {
        "records": 6, "pass": 5, "fail": 3, "error": 0, "skipped": 1, "not_applicable": 0,
        "dead_lettered": 1}
    assert summary["rules"] == {
        "groundedness": {"pass": 3, "fail": 1, "error": 0},
        "missing_citation": {"pass": 1, "fail": 1, "error": 0},
        "answered_without_tool": {"pass": 1, "fail": 1, "error": 0},
    }
    # The judge's figures are its own four verdicts', not the deterministic rules' 0 ms.
    assert sum(summary["scores"].values()) == 4
    assert summary["latency_ms_p50"] > 0


async def test_without_groundedness_a_replay_and_its_dry_run_need_no_key(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    judge, server = fake_judge
    topics, start = await seed_rules(kafka)
    env = worker_env(topics.env(kafka), server.url, RULES="missing_citation")
    for name in ("OPENAI_API_KEY", "MIN_ACCEPTABLE_SCORE"):
        del env[name]
        monkeypatch.delenv(name, raising=False)
    dry_path, real_path = tmp_path / "dry.json", tmp_path / "real.json"

    assert await replay(env, monkeypatch, "--from", start, "--dry-run",
                        "--summary-json", str(dry_path)) == 0

    dry = read_summary(dry_path)
    assert dry["rules"] == {"missing_citation": {"pass": 1, "fail": 1, "error": 0}}
    assert {k: dry[k] for k in ("records", "would_judge", "estimated_tokens", "not_applicable",
                                "skipped", "dead_lettered")} == {
        "records": 6, "would_judge": 0, "estimated_tokens": 0, "not_applicable": 2,
        "skipped": 1, "dead_lettered": 1}
    assert await read_all(kafka, topics.verdicts, settle_s=1.0, timeout_s=3) == []

    assert await replay(env, monkeypatch, "--from", start,
                        "--summary-json", str(real_path)) == 0

    records = await read_all(kafka, topics.verdicts, at_least=2, settle_s=1.0)
    assert sorted((json.loads(r.value)["trace_id"], json.loads(r.value)["verdict"])
                  for r in records) == [("full", "pass"), ("uncited", "fail")]
    real = read_summary(real_path)
    assert real["rules"] == dry["rules"], "the dry run ran the very rules"
    assert (real["records"], real["not_applicable"]) == (6, 2)
    assert judge.count() == 0
