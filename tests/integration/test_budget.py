"""``JUDGE_BUDGET_USD_PER_DAY`` across a fleet: three replicas in one group sharing one judge
account and one cap, under steady traffic, on a real broker with the fake judge over HTTP.

The spend stops between the cap and the cap plus the overshoot bound the docs give
(docs/cost-controls.md, "A daily spend cap"); after the cap no replica calls the judge while
the deterministic rule's verdicts go on; every left-out trace is counted; and a replica
restarted after the cap reads the day's spend back before it judges, and spends nothing.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx2
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions

from consumer.cost.daily_budget import DailyBudget
from consumer.localjudge.server import JudgeServer
from consumer.pipeline import fleet_spend
from scripts.kafka import broker
from tests.integration.test_cost_controls import cited, scoring_calls, scrape
from tests.support.fake_judge import ScriptedJudge
from tests.support.http import wait_status
from tests.support.ports import free_port
from tests.support.streams import Topics, create_topics, produce
from tests.support.workers import VerdictCollector, WorkerPool, tracebacks, worker_env

pytestmark = pytest.mark.integration

REPLICAS = 3
PARTITIONS = 6
CAP_USD = 0.50
CONCURRENCY = 4  # JUDGE_MAX_CONCURRENCY: calls counted in flight per replica
PRICE = 10.0  # USD per million tokens, in and out: about half a cent a call here
TRACES = 400  # about 2 USD of judging
RATE_PER_S = 40  # steady traffic: the stream never pauses while the cap is reached


def grounded(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [v for v in verdicts if v["rule"] == "groundedness"]


async def checked(out: VerdictCollector, count: int, timeout_s: float) -> bool:
    """Wait until ``count`` traces have their missing_citation verdict."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sum(v["rule"] == "missing_citation" for v in out.verdicts) >= count:
            return True
        await asyncio.sleep(0.2)
    return False


async def steady(kafka: str, topic: str, ids: list[str]) -> None:
    """Produce ``ids`` at ``RATE_PER_S``, a tenth of a second's worth at a time."""
    step = RATE_PER_S // 10
    for start in range(0, len(ids), step):
        await produce(kafka, topic, [cited(trace_id) for trace_id in ids[start:start + step]])
        await asyncio.sleep(0.1)


async def ready(http: httpx2.AsyncClient, port: int) -> None:
    """Wait for the worker's readiness: it has read the day's spend and joined the group."""
    await wait_status(http, f"http://127.0.0.1:{port}/readyz", 200, timeout_s=60)


@pytest.mark.parametrize("results_topic", ["there", "created-by-the-first-verdict"])
async def test_three_replicas_stop_judging_at_the_fleets_cap_and_a_restart_keeps_stopped(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    http: httpx2.AsyncClient, results_topic: str,
) -> None:
    """A fresh deployment (the results topic created by the first verdict published, after
    the replicas started) is held to the cap as well."""
    judge, server = fake_judge
    judge.latency_s = 0.2  # calls overlap: what is in flight when the cap is reached counts
    topics = Topics.fresh("budget")
    if results_topic == "there":
        await create_topics(kafka, topics, partitions=PARTITIONS)
    else:
        await broker.create_topics(kafka, {topics.traces: PARTITIONS, topics.dlq: 1})
    ports = [free_port() for _ in range(REPLICAS)]
    env = worker_env(topics.env(kafka), server.url, RULES="groundedness,missing_citation",
                     JUDGE_PRICE_INPUT_PER_MILLION=str(PRICE),
                     JUDGE_PRICE_OUTPUT_PER_MILLION=str(PRICE),
                     JUDGE_BUDGET_USD_PER_DAY=str(CAP_USD),
                     JUDGE_MAX_CONCURRENCY=str(CONCURRENCY))
    ids = [f"budget-{n:04d}" for n in range(TRACES)]
    later = [f"later-{n:03d}" for n in range(30)]

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        workers = [await pool.start({**env, "HEALTH_PORT": str(port)}, name=f"replica-{n}")
                   for n, port in enumerate(ports)]
        for port in ports:
            await ready(http, port)
        await steady(kafka, topics.traces, ids)
        assert await checked(out, TRACES, timeout_s=120), workers[0].log()
        await asyncio.sleep(2.0)  # a verdict still on its way, if any, has time to arrive
        spent = sum(v["cost_usd"] for v in grounded(out.verdicts))
        calls = len(scoring_calls(judge))
        metrics = [await scrape(http, port) for port in ports]

        # A replica restarted after the cap: it reads the day back first and spends nothing.
        assert await workers[0].terminate() == 0
        restarted = await pool.start({**env, "HEALTH_PORT": str(ports[0])}, name="restarted")
        await ready(http, ports[0])  # running, not only started: it owns partitions
        await steady(kafka, topics.traces, later)
        assert await checked(out, TRACES + len(later), timeout_s=60), restarted.log()
        await asyncio.sleep(1.0)
        calls_after = len(scoring_calls(judge))
        for worker in [*workers[1:], restarted]:
            assert await worker.terminate() == 0

    judged = grounded(out.verdicts)
    one_call = max(v["cost_usd"] for v in judged)
    # In flight across the replicas when the cap was reached, plus what the others answered
    # and had not yet published then (about a round of calls each): docs/cost-controls.md.
    bound = 2 * REPLICAS * CONCURRENCY * one_call
    skips = sum(m["groundedness_skipped_total"][("budget", "groundedness")] for m in metrics)
    print(f"\ncap {CAP_USD} USD, {TRACES} traces ({TRACES * one_call:.2f} USD of judging): "
          f"{len(judged)} judged for {spent:.4f} USD ({spent - CAP_USD:+.4f} past the cap, "
          f"bound {bound:.4f}); {skips:.0f} skipped for the budget; "
          f"{calls_after - calls} calls after the restart")
    assert CAP_USD <= spent <= CAP_USD + bound
    assert calls == len(judged), "every call is a published verdict"
    assert calls_after == calls, "no judge call after the cap, the restarted replica's included"
    assert len({v["trace_id"] for v in out.verdicts if v["rule"] == "missing_citation"}) == (
        TRACES + len(later)), "the deterministic rule goes on"
    assert skips == TRACES - len(judged), "every trace left unjudged is counted"
    for m in metrics:
        assert m["groundedness_budget_remaining_usd"][()] <= 0
    budget_lines = [line for worker in [*workers, restarted] for line in worker.log().splitlines()
                    if "judge_budget_reached" in line]
    assert 1 <= len(budget_lines) <= REPLICAS + 1, "said once a day per replica"
    assert not tracebacks("".join(worker.log() for worker in [*workers, restarted]))


async def test_the_spend_reader_counts_each_verdict_once_as_the_results_topic_grows(
    kafka: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Partitions added to the results topic are read from the day's start, and those read
    so far keep their place (assigning anew would read them again: the spend twice); an open
    transaction does not hide what was published after it; yesterday's verdicts do not count."""
    monkeypatch.setattr(fleet_spend, "PARTITIONS_EVERY_S", 0.2)
    topic = f"verdicts-grow-{uuid.uuid4().hex[:8]}"
    await broker.create_topics(kafka, {topic: 1})
    now_ms = int(time.time() * 1000)
    yesterday_ms = now_ms - 86_400_000

    def verdict(n: int, cost: float) -> bytes:
        return json.dumps({"verdict_id": f"v{n}", "rule": "groundedness",
                           "cost_usd": cost}).encode()

    producer = AIOKafkaProducer(bootstrap_servers=kafka, enable_idempotence=True)
    stuck = AIOKafkaProducer(bootstrap_servers=kafka, transactional_id=f"stuck-{topic}")
    await producer.start()
    await stuck.start()
    budget = DailyBudget(10.0)
    reader = AIOKafkaConsumer(bootstrap_servers=kafka, enable_auto_commit=False,
                              auto_offset_reset="earliest", isolation_level="read_uncommitted")
    spend = fleet_spend.FleetSpend(reader, topic, budget)
    stop = asyncio.Event()
    try:
        await producer.send_and_wait(topic, verdict(0, 5.0), partition=0,
                                     timestamp_ms=yesterday_ms)
        await producer.send_and_wait(topic, verdict(1, 0.10), partition=0)
        await stuck.begin_transaction()  # left open, as by a replica killed mid-transaction
        await stuck.send_and_wait(topic, verdict(2, 0.01), partition=0)
        await producer.send_and_wait(topic, verdict(3, 0.20), partition=0)
        await reader.start()
        assert await spend.catch_up(stop)
        assert budget.spent_usd == pytest.approx(0.31)
        following = asyncio.create_task(spend.follow(stop))
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
        await admin.start()
        try:
            await admin.create_partitions({topic: NewPartitions(total_count=2)})
        finally:
            await admin.close()
        await asyncio.sleep(1.5)  # the new partition found, the old one left where it was
        await producer.client.force_metadata_update()  # the test's producer sees it too
        await producer.send_and_wait(topic, verdict(4, 1.0), partition=1)
        await producer.send_and_wait(topic, verdict(5, 2.0), partition=0)
        for _ in range(50):
            if budget.spent_usd >= 3.31 - 1e-9:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # a record read twice, if any, has time to be counted
        stop.set()
        await following
        assert budget.spent_usd == pytest.approx(3.31), "every verdict today, each once"
        assert spend.records == 5, "from the first offset of today: yesterday's not read"
    finally:
        await reader.stop()
        await producer.stop()
        await stuck.stop()
