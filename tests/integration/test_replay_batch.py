"""`groundedness replay --batch` through the real command, a real broker and the fake judge's
Batch API over HTTP (the real openai SDK): the verdicts are a synchronous replay's (same ids,
rules, filter and sampling decisions; half the cost), on trace events and on spans; a replay
killed while its batch runs and again while it publishes, then run again, publishes every
verdict once and creates its batch once; two runs of one window started together create one
batch and publish each verdict once (the second refused, naming the first); an expired batch's
requests are sent again; a line the batch failed is judged synchronously."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from consumer.cli import main
from consumer.cost.sampling import sampled
from consumer.localjudge.batches import BatchFate
from consumer.localjudge.server import JudgeServer
from consumer.replay.batch import command as replay_batch
from consumer.replay.batch.runner import Polling
from consumer.rules.verdicts import verdict_id
from tests.integration.test_replay_spans import GARBAGE, Trace, answered, indexing, rag
from tests.integration.test_replay_spans import produce as produce_at
from tests.support.fake_judge import ScriptedJudge
from tests.support.otel_spans import otlp_proto
from tests.support.streams import Topics, create_topics, produce, read_all, trace
from tests.support.waiting import until
from tests.support.workers import GROUNDEDNESS, WORKER_VARIABLES, worker_env

pytestmark = pytest.mark.integration

PARTITIONS = 3
HOUR_MS = 3_600_000
DOCS = [{"id": "kb-1", "content": "Refunds are prorated to the day."}]
PRICES = {"JUDGE_PRICE_INPUT_PER_MILLION": "0.15", "JUDGE_PRICE_OUTPUT_PER_MILLION": "0.60"}
# What differs between a batch replay's verdict and a synchronous one's: when it was made,
# how long the answer took (the batch's duration) and what it cost (half).
NOT_COMPARED = ("evaluated_at", "latency_ms", "cost_usd")
FLAKY = "[[fail=1 status=500]]"  # the batch's attempt fails; the synchronous judge's passes


@pytest.fixture(autouse=True)
def fast_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process replays look at their batches every few milliseconds."""
    monkeypatch.setattr(replay_batch, "POLLING", Polling(first_s=0.01, max_s=0.05))


async def seed(bootstrap: str, name: str, values: list[bytes]) -> tuple[Topics, list[str]]:
    """A fresh traces topic with ``values`` a second apart an hour ago; the window's args."""
    topics = Topics.fresh(name)
    await create_topics(bootstrap, topics, partitions=PARTITIONS)
    base_ms = (int(time.time() * 1000) - HOUR_MS) // 1000 * 1000
    await produce(bootstrap, topics.traces, values, first_timestamp_ms=base_ms)
    return topics, ["--from", iso(base_ms - 1000), "--to", iso(base_ms + HOUR_MS // 2)]


def iso(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def scored(prefix: str, count: int) -> list[bytes]:
    return [trace(f"{prefix}-{i}", f"Answer {i} [1]. [[score={i % 5 + 1}]]",
                  retrieved_documents=DOCS) for i in range(count)]


async def replay(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """Run `groundedness replay ARGS` (the real command, in a thread: it runs its own loop)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return await asyncio.wait_for(asyncio.to_thread(main, ["replay", *args]), timeout=120)


def summary_at(path: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads(path.read_text())
    return summary


async def verdicts_on(bootstrap: str, topic: str, at_least: int) -> dict[str, dict[str, Any]]:
    """The topic's verdicts by id, checking that none came twice."""
    records = await read_all(bootstrap, topic, at_least=at_least, settle_s=1.5)
    keys = Counter(record.key for record in records)
    assert [key for key, n in keys.items() if n > 1] == [], "a verdict published twice"
    found = {}
    for record in records:
        assert record.value is not None
        verdict = json.loads(record.value)
        assert record.key == verdict["verdict_id"].encode()
        found[verdict["verdict_id"]] = verdict
    return found


def compared(verdict: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in verdict.items() if k not in NOT_COMPARED}


def assert_same_but_half_the_cost(batch: dict[str, dict[str, Any]],
                                  synchronous: dict[str, dict[str, Any]]) -> None:
    assert set(batch) == set(synchronous)
    for key, verdict in batch.items():
        assert compared(verdict) == compared(synchronous[key])
        if verdict.get("cost_usd") is not None:
            assert verdict["cost_usd"] == pytest.approx(synchronous[key]["cost_usd"] / 2)


async def test_a_batch_replay_publishes_a_synchronous_replays_verdicts_at_half_the_cost(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    judge, server = fake_judge
    server.batches.seconds_per_state = 0.0
    staging = [trace(f"staging-{i}", f"Staged [1]. [[score={i + 1}]]", retrieved_documents=DOCS,
                     metadata={"environment": "staging"}) for i in range(3)]
    same = "The same answer [1]. [[score=4]]"
    values = [*scored("t", 14), *staging,
              trace("same-a", same, retrieved_documents=DOCS),
              trace("same-b", same, retrieved_documents=DOCS),
              trace("uncited", "Prorated. [[score=2]]", retrieved_documents=DOCS),
              trace("empty", "  "), b"not json"]
    topics, window = await seed(kafka, "replay-batch", values)
    env = worker_env(topics.env(kafka), server.url, RULES="groundedness,missing_citation",
                     SAMPLE_RATE="0.7", TRACE_FILTER="metadata.environment != 'staging'",
                     **PRICES)
    monkeypatch.chdir(tmp_path)  # the state file's default place

    assert await replay(env, monkeypatch, *window, "--batch", "--summary-json", "b.json") == 0
    batch_calls = judge.count()
    synchronous_env = env | {"VERDICTS_TOPIC": f"{topics.verdicts}-synchronous"}
    assert await replay(synchronous_env, monkeypatch, *window, "--summary-json", "s.json") == 0

    judged = [f"t-{i}" for i in range(14) if sampled(f"t-{i}", 0.7)]
    judged += [t for t in ("same-a", "same-b", "uncited") if sampled(t, 0.7)]
    assert 0 < len(judged) < 17, "some sampled out"
    expected = 17 + len(judged)  # every kept trace's citations checked, and judged if sampled
    batch = await verdicts_on(kafka, topics.verdicts, expected)
    synchronous = await verdicts_on(kafka, f"{topics.verdicts}-synchronous", expected)
    assert len(batch) == expected
    assert_same_but_half_the_cost(batch, synchronous)
    assert {v["trace_id"] for v in batch.values() if v["rule"] == "groundedness"} == set(judged)

    b, s = summary_at(tmp_path / "b.json"), summary_at(tmp_path / "s.json")
    same_counts = ("records", "pass", "fail", "error", "skipped", "filtered", "sampled_out",
                   "dead_lettered", "rules", "scores", "tokens")
    assert {k: b[k] for k in same_counts} == {k: s[k] for k in same_counts}
    # filtered: the verdicts TRACE_FILTER left out, both rules' for each of 3 traces.
    assert (b["filtered"], b["sampled_out"]) == (2 * 3, 17 - len(judged))
    assert b["cost_usd"] == pytest.approx(s["cost_usd"] / 2)
    both_same = {"same-a", "same-b"} <= set(judged)
    requests = len(judged) - both_same  # identical requests make one line
    assert b["batch"] == {
        "state_file": b["batch"]["state_file"], "batches": 1, "batches_expired": 0,
        "requests": requests, "answered_by_batch": requests, "unanswered_by_batch": {},
        "sent_synchronously": 0, "resubmitted": 0, "already_published": 0, "repeated_in_window": 0,
        "price_factor": 0.5}
    assert batch_calls == requests, "each request answered once, by the batch"
    state = Path(b["batch"]["state_file"])
    resolved = os.path.realpath(tmp_path)  # noqa: ASYNC240 - a local directory, once
    assert str(state.parent) == resolved, "the working directory, resolved"
    assert state.name.startswith(f"batch-{topics.traces}-")
    dead = await read_all(kafka, topics.dlq, at_least=2, settle_s=1.0)
    assert [r.value for r in dead] == [b"not json", b"not json"], "one per replay"


async def start_replay(env: dict[str, str], cwd: Path, log: Path,
                       *args: str) -> asyncio.subprocess.Process:
    """`groundedness replay ARGS` as a process of its own (so SIGKILL is real)."""
    inherited = {k: v for k, v in os.environ.items() if k.upper() not in WORKER_VARIABLES}
    with log.open("ab") as output:
        return await asyncio.create_subprocess_exec(
            str(GROUNDEDNESS), "replay", *args, env=inherited | env, cwd=str(cwd),
            stdin=asyncio.subprocess.DEVNULL, stdout=output, stderr=output)


def state_file(directory: Path) -> dict[str, Any] | None:
    """The replay's state (its default name: ``batch-<topic>-<from>-<to>.json``), if any."""
    found = list(directory.glob("batch-*.json"))
    if not found:
        return None
    try:
        state: dict[str, Any] = json.loads(found[0].read_text())
    except ValueError:
        return None  # being replaced right now
    return state


def published_lines(directory: Path) -> list[str]:
    found = list(directory.glob("batch-*.json.*.published"))
    return found[0].read_text().split("\n")[:-1] if found else []


@contextlib.contextmanager
def killed_on_exit(*processes: asyncio.subprocess.Process) -> Iterator[None]:
    try:
        yield
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()


async def test_a_replay_killed_while_batching_and_while_publishing_publishes_each_verdict_once(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    judge, server = fake_judge
    server.batches.seconds_per_state = 1.5  # validating, in progress, finalizing: 4.5 s
    # The batch fails the slow one's line; judged synchronously, it holds the publishing
    # pass for 5 s after every other verdict is out.
    slow = trace("slow", f"Slow [1]. {FLAKY} [[delay=5]] [[score=4]]", retrieved_documents=DOCS)
    topics, window = await seed(kafka, "replay-batch-kill", [*scored("t", 11), slow])
    trace_ids = {f"t-{i}" for i in range(11)} | {"slow"}
    env = worker_env(topics.env(kafka), server.url, JUDGE_TIMEOUT_SECONDS="15",
                     LOG_LEVEL="info")
    log = tmp_path / "replays.log"

    first = await start_replay(env, tmp_path, log, *window, "--batch")
    with killed_on_exit(first):
        await until(lambda: any(b["batch_id"] for b in (state_file(tmp_path) or {}).get(
            "batches", [])), timeout_s=30)
        first.kill()
        assert await first.wait() == -9
    [batch_id] = server.batches.created
    status = server.batches.retrieve(batch_id).body
    assert isinstance(status, dict)
    assert status["status"] in ("validating", "in_progress")
    assert published_lines(tmp_path) == []

    second = await start_replay(env, tmp_path, log, *window, "--batch")
    with killed_on_exit(second):
        await until(lambda: len(published_lines(tmp_path)) >= 11, timeout_s=60)
        second.kill()
        assert await second.wait() == -9
    assert sorted(published_lines(tmp_path)) == sorted(
        verdict_id(t) for t in trace_ids - {"slow"}), log.read_text()[-3000:]

    monkeypatch.chdir(tmp_path)
    assert await replay(env | {"LOG_LEVEL": "warning"}, monkeypatch, *window, "--batch",
                        "--summary-json", "third.json") == 0
    third = summary_at(tmp_path / "third.json")
    assert (third["pass"], third["fail"], third["error"]) == (1, 0, 0)
    assert {k: third["batch"][k] for k in ("batches", "already_published",
                                           "sent_synchronously", "unanswered_by_batch")} == {
        "batches": 1, "already_published": 11, "sent_synchronously": 1,
        "unanswered_by_batch": {"judge_http_500": 1}}
    capsys.readouterr()

    assert await replay(env | {"LOG_LEVEL": "warning"}, monkeypatch, *window, "--batch",
                        "--summary-json", "fourth.json") == 0
    fourth = summary_at(tmp_path / "fourth.json")
    assert (fourth["pass"], fourth["fail"], fourth["batch"]["already_published"]) == (0, 0, 12)
    assert fourth["batch"]["sent_synchronously"] == 0, "not paid for again"
    out = capsys.readouterr()
    assert "nothing published: every verdict of this window was published by an earlier" \
        in " ".join(out.out.split())

    verdicts = await verdicts_on(kafka, topics.verdicts, 12)
    assert set(verdicts) == {verdict_id(t) for t in trace_ids}
    assert verdicts[verdict_id("slow")]["verdict"] == "pass"
    assert len(server.batches.created) == 1, "no batch created twice"
    assert len(server.batches.stored("batch")) == 1, "nor its file uploaded twice"
    assert len(judge.calls_for("Slow [1].")) == 1 + 2, "the batch, then two synchronous runs"


async def test_an_expired_batchs_requests_are_sent_again_and_every_verdict_published(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    judge, server = fake_judge
    server.batches.seconds_per_state = 0.0
    server.batches.fates.append(BatchFate(expire_after=3))
    topics, window = await seed(kafka, "replay-batch-expired", scored("t", 8))
    env = worker_env(topics.env(kafka), server.url)
    path = tmp_path / "summary.json"

    assert await replay(env, monkeypatch, *window, "--batch", "--batch-state",
                        str(tmp_path / "state.json"), "--summary-json", str(path)) == 0

    verdicts = await verdicts_on(kafka, topics.verdicts, 8)
    assert {v["trace_id"]: v["raw_score"] for v in verdicts.values()} == {
        f"t-{i}": i % 5 + 1 for i in range(8)}
    summary = summary_at(path)
    assert {k: summary["batch"][k] for k in ("batches", "batches_expired", "resubmitted",
                                             "answered_by_batch", "sent_synchronously")} == {
        "batches": 2, "batches_expired": 1, "resubmitted": 5, "answered_by_batch": 8,
        "sent_synchronously": 0}
    assert summary["batch"]["state_file"] == str(tmp_path / "state.json")
    assert judge.count() == 8, "each request answered once"
    assert len(server.batches.created) == 2


async def test_a_line_the_batch_failed_is_judged_synchronously_at_the_full_price(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    judge, server = fake_judge
    server.batches.seconds_per_state = 0.0
    flaky = trace("flaky", f"Fine [1]. {FLAKY} [[score=4]]", retrieved_documents=DOCS)
    topics, window = await seed(kafka, "replay-batch-failed", [*scored("t", 4), flaky])
    env = worker_env(topics.env(kafka), server.url, **PRICES)
    path = tmp_path / "summary.json"

    assert await replay(env, monkeypatch, *window, "--batch", "--batch-state",
                        str(tmp_path / "state.json"), "--summary-json", str(path)) == 0

    verdicts = {v["trace_id"]: v for v in (await verdicts_on(kafka, topics.verdicts, 5)).values()}
    assert set(verdicts) == {"flaky", "t-0", "t-1", "t-2", "t-3"}
    assert (verdicts["flaky"]["verdict"], verdicts["flaky"]["reason"]) == (
        "pass", "scripted verdict 4")
    assert [c.status for c in judge.calls_for("Fine [1].")] == [500, 200], \
        "the batch's line failed, the synchronous call answered"
    for trace_id, verdict in verdicts.items():
        usage = verdict["usage"]
        full = (usage["prompt_tokens"] * 0.15 + usage["completion_tokens"] * 0.60) / 1e6
        factor = 1.0 if trace_id == "flaky" else 0.5
        assert verdict["cost_usd"] == pytest.approx(full * factor)
    batch = summary_at(path)["batch"]
    assert {k: batch[k] for k in ("requests", "answered_by_batch", "unanswered_by_batch",
                                  "sent_synchronously")} == {
        "requests": 5, "answered_by_batch": 4, "unanswered_by_batch": {"judge_http_500": 1},
        "sent_synchronously": 1}


async def test_a_span_topics_batch_replay_publishes_its_synchronous_replays_verdicts(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    _, server = fake_judge
    server.batches.seconds_per_state = 0.0
    topics = Topics.fresh("replay-batch-spans")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    base = (int(time.time() * 1000) - 3 * HOUR_MS) // 1000 * 1000
    straddling, rootless = rag("Who wrote Dune?"), rag("Who wrote Emma?")
    weak, after = answered("Isaac Asimov. [[score=2]]"), rag("Q3?")

    def at(trace: Trace, spans: list[ReadableSpan], seconds: int) -> tuple[bytes, bytes, int]:
        return trace.key, otlp_proto(spans), base + seconds * 1000

    await produce_at(kafka, topics.traces, [
        at(straddling, straddling.spans[:3], 0),
        (b"garbage", GARBAGE, base + 1_000),
        at(rootless, rootless.spans[:-1], 2),
        at(weak, weak.spans, 3),
        # --to is at +10 s
        at(straddling, straddling.spans[3:], 11),
        at(after, after.spans, 12),
        at(rootless, indexing().spans, 200),  # 198 s of quiet on its partition
    ])
    env = worker_env(topics.env(kafka), server.url, TRACES_FORMAT="otlp_proto",
                     TRACE_QUIET_SECONDS="10", TRACE_MAX_WAIT_SECONDS="60", **PRICES)
    window = ("--from", iso(base), "--to", iso(base + 10_000))

    assert await replay(env, monkeypatch, *window, "--batch", "--batch-state",
                        str(tmp_path / "state.json"), "--summary-json",
                        str(tmp_path / "b.json")) == 0
    synchronous_env = env | {"VERDICTS_TOPIC": f"{topics.verdicts}-synchronous"}
    assert await replay(synchronous_env, monkeypatch, *window, "--summary-json",
                        str(tmp_path / "s.json")) == 0

    batch = await verdicts_on(kafka, topics.verdicts, 3)
    synchronous = await verdicts_on(kafka, f"{topics.verdicts}-synchronous", 3)
    assert {v["trace_id"] for v in batch.values()} == {
        straddling.trace_id, rootless.trace_id, weak.trace_id}
    assert_same_but_half_the_cost(batch, synchronous)
    assert {v["assembly"]["closed_by"] for v in batch.values()} == {"quiet", "max_wait"}
    b, s = summary_at(tmp_path / "b.json"), summary_at(tmp_path / "s.json")
    same_counts = ("records", "pass", "fail", "dead_lettered", "traces", "closed_by", "spans")
    assert {k: b[k] for k in same_counts} == {k: s[k] for k in same_counts}
    assert (b["batch"]["requests"], b["batch"]["answered_by_batch"]) == (3, 3)
    assert [r.value for r in await read_all(kafka, topics.dlq, at_least=2, settle_s=1.0)] == [
        GARBAGE, GARBAGE], "one per replay"


async def test_two_batch_replays_of_one_window_at_once_create_one_batch_and_publish_once(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
) -> None:
    _, server = fake_judge
    server.batches.seconds_per_state = 1.0  # the batch runs for 3 s: the two runs overlap
    topics, window = await seed(kafka, "replay-batch-twice", scored("t", 20))
    env = worker_env(topics.env(kafka), server.url)
    logs = [tmp_path / "first.log", tmp_path / "second.log"]

    # The same command in two terminals (or a Job's pod and its replacement): same window,
    # same working directory, so the same state file.
    runs = [await start_replay(env, tmp_path, log, *window, "--batch") for log in logs]
    with killed_on_exit(*runs):
        codes = await asyncio.wait_for(asyncio.gather(*(run.wait() for run in runs)), 120)

    records = await read_all(kafka, topics.verdicts, at_least=20, settle_s=2.0)
    ids = Counter(record.key for record in records)
    outputs = [log.read_text() for log in logs]
    assert (len(server.batches.created), len(records), len(ids)) == (1, 20, 20), outputs
    assert sorted(codes) == [0, 2], outputs
    refused = outputs[codes.index(2)].strip().splitlines()
    [line] = refused
    assert "is being replayed by pid " in line
    assert f"on {socket.gethostname()}" in line
    assert str(runs[codes.index(0)].pid) in line
