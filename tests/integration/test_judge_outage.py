"""The judge failing for everyone holds the worker; failing for one trace gives an error."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from consumer.localjudge.server import JudgeServer
from consumer.ops.metrics import REGISTRY
from tests.support.fake_judge import ScriptedJudge
from tests.support.streams import (
    Topics,
    create_topics,
    group_offsets,
    in_process_worker,
    produce,
    read_all,
    trace,
    verdicts_by_trace,
)
from tests.support.waiting import until
from tests.support.workers import worker_env

pytestmark = pytest.mark.integration


def outage_env(kafka: str, topics: Topics, server: JudgeServer, **overrides: str) -> dict[str, str]:
    """The worker's environment for these tests: four judge calls at a time, 5 s each."""
    return worker_env(topics.env(kafka), server.url, JUDGE_MAX_CONCURRENCY="4",
                      JUDGE_TIMEOUT_SECONDS="5", **overrides)


@pytest.mark.parametrize(
    ("delivery", "status"),
    [("at_least_once", 503), ("exactly_once", 503), ("at_least_once", 400)],
    ids=["503-at-least-once", "503-exactly-once", "400-at-least-once"],
)
async def test_outage_holds_then_resumes_without_error_verdicts(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    delivery: str, status: int,
) -> None:
    """Every call failing, probes included, is an outage: a 5xx, and a 4xx alike (a 400 for
    every call is the judge failing for everyone, not every trace's fault)."""
    judge, server = fake_judge
    judge.latency_s = 0.02
    topics = Topics.fresh("outage")
    await create_topics(kafka, topics, partitions=3)
    count = 300
    await produce(kafka, topics.traces, [trace(f"t{i}", f"answer {i} [[score=4]]")
                                         for i in range(count)])

    async with in_process_worker(outage_env(kafka, topics, server, DELIVERY=delivery),
                                 monkeypatch):
        await until(lambda: judge.count() >= 60, timeout_s=30, interval_s=0.05)
        judge.outage = status
        outage_started = time.monotonic()
        await asyncio.sleep(8.0)
        during = [c for c in judge.calls if c.at >= outage_started + 4.0]
        circuit_open = REGISTRY.get_sample_value("groundedness_circuit_open")
        judge.outage = None
        resumed_at = time.monotonic()
        records = await read_all(kafka, topics.verdicts, at_least=count, timeout_s=90)
        recovered_s = time.monotonic() - resumed_at
        await asyncio.sleep(0.5)

    verdicts = verdicts_by_trace(records)
    outcomes = {v["verdict"] for group in verdicts.values() for v in group}
    print(f"\njudge outage ({status} for every call, {delivery}): {len(verdicts)} of {count} "
          f"verdicts, outcomes {sorted(outcomes)}, {len(during)} calls in the outage's last "
          f"4 s, circuit_open {circuit_open}, all done {recovered_s:.1f} s after it ended")
    assert len(verdicts) == count
    assert outcomes == {"pass"}, "no trace is turned into an error by an outage"
    # Once the circuit is open only probes reach the judge, at growing intervals.
    assert all(c.answer == "probe" for c in during), [c.answer for c in during][:5]
    assert 1 <= len(during) <= 4
    assert circuit_open == 1
    assert recovered_s < 40
    committed, ends = await group_offsets(kafka, topics.group, topics.traces)
    assert committed == ends


async def test_every_seventh_call_429_still_gives_correct_verdicts(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    judge, server = fake_judge
    judge.fail_every_nth = (7, 429)
    judge.retry_after_s = 0.2
    topics = Topics.fresh("every7")
    await create_topics(kafka, topics, partitions=3)
    count = 120
    await produce(kafka, topics.traces, [trace(f"t{i}", f"a {i} [[score={1 + i % 5}]]")
                                         for i in range(count)])
    async with in_process_worker(outage_env(kafka, topics, server), monkeypatch):
        records = await read_all(kafka, topics.verdicts, at_least=count, timeout_s=60,
                                 settle_s=1.0)
    verdicts = verdicts_by_trace(records)
    assert len(verdicts) == count
    for trace_id, group in verdicts.items():
        raw = 1 + int(trace_id[1:]) % 5
        assert [v["raw_score"] for v in group] == [raw] * len(group)
    rate_limited = [c for c in judge.calls if c.status == 429]
    assert len(rate_limited) >= count // 7
    # Each 429 asked for 0.2 s: no retry of that trace came sooner.
    for call in rate_limited:
        later = [c.at for c in judge.calls_for(call.answer) if c.at > call.at]
        assert later, f"{call.answer} was never retried"
        assert later[0] - call.at >= 0.19


@pytest.mark.parametrize("status", [502, 403])
async def test_per_trace_failure_while_healthy_is_an_error_verdict(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    status: int,
) -> None:
    """A 5xx or a refusal (a gateway's 403) for one trace while the judge answers others is
    that trace's error verdict, and its partition's commit moves past it."""
    _, server = fake_judge
    topics = Topics.fresh("onebad")
    await create_topics(kafka, topics, partitions=1)
    values = [trace(f"ok{i}", f"fine {i} [[score=5]]") for i in range(30)]
    values.insert(10, trace("bad", f"always fails [[status={status}]]"))
    await produce(kafka, topics.traces, values)
    async with in_process_worker(outage_env(kafka, topics, server), monkeypatch):
        records = await read_all(kafka, topics.verdicts, at_least=31, timeout_s=60)
    verdicts = verdicts_by_trace(records)
    (bad,) = verdicts["bad"]
    assert bad["verdict"] == "error"
    assert bad["error"]["type"] == f"judge_http_{status}"
    assert json.dumps(bad).count("sk-test") == 0
    assert all(v[0]["verdict"] == "pass" for k, v in verdicts.items() if k != "bad")
    committed, ends = await group_offsets(kafka, topics.group, topics.traces)
    assert committed == ends
