"""Replay speed against the Little's-law bound: verdicts/s <= concurrency / judge latency.

Produces ``--count`` traces (explicit timestamps) to a fresh 3-partition topic, starts the
benchmark judge (``benchmarks.judge``) with a fixed latency, runs ``groundedness replay`` over
the window as a separate process, and compares the verdicts per second (from the replay's own
summary: first fetch to last outcome acknowledged) with the bound. Judge latency percentiles
in the summary count from the evaluation's start, so they include waiting for one of the
judge's slots. The replay process's CPU time per verdict says how far a busy (or small)
machine holds it below the bound: at ``c`` ms of CPU per verdict one event loop cannot exceed
``1000 / c`` verdicts/s.

    python -m benchmarks.replay_speed [--count 2000] [--concurrency 16] [--latency 0.2]

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else a broker from ``scripts/kafka/broker.py``; the
topics it creates are deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from benchmarks.systems import Bench, start_judge
from scripts.kafka.broker import kafka_bootstrap


async def produce(bootstrap: str, topic: str, count: int, base_ms: int) -> None:
    """``count`` traces, a millisecond apart from ``base_ms``, round-robin over partitions."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                linger_ms=20)
    await producer.start()
    try:
        partitions = sorted(await producer.partitions_for(topic))
        for i in range(count):
            value = json.dumps({"trace_id": f"bench-{i}", "output": f"Answer number {i}.",
                                "retrieved_documents": ["A doc."]}).encode()
            await producer.send(topic, value, partition=partitions[i % len(partitions)],
                                timestamp_ms=base_ms + i)
        await producer.flush()
    finally:
        await producer.stop()


def run_replay(env: dict[str, str], start_iso: str, summary: Path) -> tuple[int, float, float]:
    """Run the real command; (exit code, wall seconds and CPU seconds of the process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "consumer.cli", "replay", "--from", start_iso,
         "--summary-json", str(summary)],
        env=env, stdout=subprocess.DEVNULL, check=False,
    )
    wall_s = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done.returncode, wall_s, cpu_s


async def measure(count: int, concurrency: int, latency_s: float) -> dict[str, Any]:
    """One replay of ``count`` traces; the figures."""
    bootstrap, cleanup = kafka_bootstrap()
    scratch = Path(tempfile.mkdtemp(prefix="groundedness-replay-bench-"))
    bench = Bench(bootstrap, uuid.uuid4().hex[:8], scratch)
    base_ms = int(time.time() * 1000) - 600_000
    try:
        traces_topic = await bench.topic("traces", partitions=3)
        env = dict(os.environ) | {
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "TRACES_TOPIC": traces_topic,
            "VERDICTS_TOPIC": await bench.topic("verdicts"), "DLQ_TOPIC": await bench.topic("dlq"),
            "CONSUMER_GROUP": bench.name("group"), "MIN_ACCEPTABLE_SCORE": "0.5",
            "JUDGE_MAX_CONCURRENCY": str(concurrency), "LOG_LEVEL": "warning",
            "JUDGE_CACHE_SIZE": "0",  # repeated sample texts: measure the judge path itself
        }
        await produce(bootstrap, traces_topic, count, base_ms)
        judge = await start_judge(bench, latency_s)
        try:
            env |= {"OPENAI_API_KEY": "bench", "OPENAI_BASE_URL": judge.url,
                    "JUDGE_MODEL": "bench-judge"}
            start_iso = datetime.fromtimestamp(base_ms / 1000, UTC).isoformat()
            summary_path = scratch / "summary.json"
            code, wall_s, cpu_s = await asyncio.to_thread(run_replay, env, start_iso,
                                                          summary_path)
            if code != 0:
                raise SystemExit(f"replay exited {code}")
            summary = json.loads(summary_path.read_text())
            judge_requests = (await judge.stats())["count"]
        finally:
            await judge.stop()
    finally:
        await bench.cleanup()
        cleanup()
    verdicts = summary["pass"] + summary["fail"] + summary["error"]
    rate = verdicts / summary["elapsed_s"]
    bound = concurrency / latency_s
    return {
        "traces": count,
        "verdicts": verdicts,
        "concurrency": concurrency,
        "judge_latency_s": latency_s,
        "replay_s": summary["elapsed_s"],
        "wall_s_with_process_start": round(wall_s, 2),
        "replay_process_cpu_s": round(cpu_s, 2),
        "cpu_ms_per_verdict": round(1000 * cpu_s / max(1, verdicts), 2),
        "cpu_count": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "verdicts_per_s": round(rate, 1),
        "littles_law_bound_per_s": round(bound, 1),
        "share_of_bound": round(rate / bound, 3),
        "judge_latency_ms_p50": summary["latency_ms_p50"],
        "judge_latency_ms_p95": summary["latency_ms_p95"],
        "judge_requests": judge_requests,
    }


def main() -> int:
    """Parse the options, measure, print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.2, help="judge latency, seconds")
    args = parser.parse_args()
    figures = asyncio.run(measure(args.count, args.concurrency, args.latency))
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
