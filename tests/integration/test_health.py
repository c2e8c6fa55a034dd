"""``/healthz``, ``/readyz`` and ``/metrics`` of the real worker (a subprocess), real Kafka,
and the fake judge over HTTP: the counters match a known stream exactly, and a worker that
cannot reach Kafka is alive, unready and says so in one warning line, without tracebacks.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from consumer.localjudge.server import JudgeServer
from tests.support.fake_judge import ScriptedJudge
from tests.support.http import wait_status
from tests.support.ports import free_port
from tests.support.streams import Topics, create_topics, produce, read_all, trace
from tests.support.workers import Worker, WorkerPool, tracebacks, worker_env

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def known_stream() -> list[bytes | None]:
    """5 pass, 3 fail (threshold 0.5), 2 empty outputs and 1 undecodable record."""
    values: list[bytes | None] = [
        trace(f"pass-{i}", f"Grounded answer {i}. [[score=5]]", retrieved_documents=["Doc."])
        for i in range(5)
    ]
    values += [trace(f"fail-{i}", f"Made-up answer {i}. [[score=1]]") for i in range(3)]
    values += [trace("empty-null", None), trace("empty-blank", "   ")]
    values.append(b"{not json")
    return values


def samples(text: str) -> Samples:
    """Every sample of a Prometheus exposition, keyed by (name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


async def wait_metrics(http: httpx2.AsyncClient, url: str, done: dict[str, float],
                       timeout_s: float) -> Samples:
    """Poll ``/metrics`` until every unlabelled sample in ``done`` has its value."""
    deadline = time.monotonic() + timeout_s
    found: Samples = {}
    while time.monotonic() < deadline:
        found = samples((await http.get(url)).text)
        if all(value(found, name) == want for name, want in done.items()):
            return found
        await asyncio.sleep(0.5)
    raise AssertionError(f"metrics never reached {done}: "
                         f"{ {name: value(found, name) for name in done} }")


async def wait_lag(http: httpx2.AsyncClient, url: str, partitions: int,
                   timeout_s: float) -> dict[tuple[str, str], float]:
    """Poll ``/metrics`` until there is one lag series per partition, all 0 (or time out);
    the last series seen, by (topic, partition)."""
    deadline = time.monotonic() + timeout_s
    while True:
        lags = {
            (dict(labels)["topic"], dict(labels)["partition"]): v
            for (name, labels), v in samples((await http.get(url)).text).items()
            if name == "groundedness_consumer_lag"
        }
        if (len(lags) == partitions and not any(lags.values())) or time.monotonic() > deadline:
            return lags
        await asyncio.sleep(1)


async def test_metrics_match_a_known_stream_exactly(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    http: httpx2.AsyncClient,
) -> None:
    _, server = fake_judge
    topics = Topics.fresh("health")
    await create_topics(kafka, topics, partitions=3)
    await produce(kafka, topics.traces, known_stream())
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    async with WorkerPool(tmp_path) as pool:
        worker = await pool.start(worker_env(topics.env(kafka), server.url,
                                             HEALTH_PORT=str(port)))
        live = await wait_status(http, f"{base}/healthz", 200, timeout_s=60)
        assert live.text == "ok\n" or live.text == "starting\n"
        await wait_status(http, f"{base}/readyz", 200, timeout_s=60)

        verdicts = await read_all(kafka, topics.verdicts, at_least=8, timeout_s=90)
        # Everything is handled once the counters add up and nothing waits for a commit;
        # the lag gauges refresh every 5 s.
        found = await wait_metrics(http, f"{base}/metrics", {
            "groundedness_dead_letters_total": 1,
            "groundedness_judge_latency_seconds_count": 8, "groundedness_in_flight": 0,
        }, timeout_s=60)
        lags = await wait_lag(http, f"{base}/metrics", partitions=3, timeout_s=30)

        assert len(verdicts) == 8
        # RULES by default: groundedness alone, each verdict counted under its rule.
        verdict_series = {labels: v for (name, labels), v in found.items()
                          if name == "groundedness_verdicts_total"}
        assert verdict_series == {  # the traces name no project: the label empty
            (("project", ""), ("rule", "groundedness"), ("verdict", "pass")): 5,
            (("project", ""), ("rule", "groundedness"), ("verdict", "fail")): 3,
            (("project", ""), ("rule", "groundedness"), ("verdict", "error")): 0,
        }
        assert value(found, "groundedness_skipped_total", rule="groundedness",
                     reason="empty_output") == 2
        assert value(found, "groundedness_skipped_total", rule="groundedness",
                     reason="sampled_out") == 0
        assert value(found, "groundedness_dead_letters_total") == 1
        assert value(found, "groundedness_judge_latency_seconds_count") == 8
        assert value(found, "groundedness_judge_retries_total") == 0
        assert (value(found, "groundedness_judge_tokens_total", kind="prompt") or 0) > 0
        assert (value(found, "groundedness_judge_tokens_total", kind="completion") or 0) > 0
        assert value(found, "groundedness_in_flight") == 0
        assert value(found, "groundedness_circuit_open") == 0
        assert lags == {(topics.traces, str(p)): 0 for p in range(3)}

        assert (await http.get(f"{base}/healthz")).status_code == 200
        assert (await http.get(f"{base}/readyz")).text == "ready\n"
        assert await worker.terminate() == 0
    assert not tracebacks(worker.log())


async def test_an_unreachable_broker_is_alive_unready_and_one_clear_warning(
    fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path, http: httpx2.AsyncClient,
) -> None:
    _, server = fake_judge
    topics = Topics.fresh("nobroker")
    env = worker_env(topics.env("127.0.0.1:1"), server.url, HEALTH_PORT="0", LOG_LEVEL="info")

    async with WorkerPool(tmp_path) as pool:
        worker = await pool.start(env)
        assert await worker.wait_for_log('"health_listening"', timeout_s=60), worker.log()
        port = listening_port(worker)
        base = f"http://127.0.0.1:{port}"
        assert await worker.wait_for_log('"kafka_unreachable"', timeout_s=30), worker.log()
        await asyncio.sleep(2.5)  # at least one retry (after 1 s, then 2 s)

        ready = await http.get(f"{base}/readyz")
        assert (ready.status_code, ready.text) == (503, "starting: connecting to Kafka\n")
        assert (await http.get(f"{base}/healthz")).status_code == 200
        assert (await http.get(f"{base}/metrics")).status_code == 200
        assert worker.running
        assert await worker.terminate(timeout_s=30) == 0

    events = worker.events()
    warnings = [e for e in events if e.get("event") == "kafka_unreachable"]
    assert len(warnings) == 1, "retried, and said once a minute"
    assert all(e["level"] == "warning" and e["client"] == "producer" for e in warnings)
    assert all("127.0.0.1:1" in e["detail"] for e in warnings)
    assert "Unable connect" not in worker.log(), "aiokafka's line per attempt held back"
    assert not tracebacks(worker.log())
    assert "sk-test-secret-value" not in worker.log()


def listening_port(worker: Worker) -> int:
    for event in worker.events():
        if event.get("event") == "health_listening":
            return int(event["port"])
    raise AssertionError(f"no health_listening event in: {worker.log()}")

