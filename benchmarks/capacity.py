"""Long backlogs (cost per verdict, memory over time) and the fake judges' own capacity."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.kafka import OffsetWatch, traces
from benchmarks.scenarios import FIRST_VERDICT_TIMEOUT_S
from benchmarks.systems import BARE, Bench, RunSpec, start_judge, start_system
from consumer.inputs.trace_json import decode_trace
from consumer.judge.client import build_judge
from consumer.judge.prompt import Limits, build_request
from consumer.judge.result import TraceFailed


async def drain_backlog(
    bench: Bench, system: str, traces_topic: str, dlq: str, *, count: int, concurrency: int,
    cap_s: float, profile_to: Path | None = None, log_level: str = "info",
) -> dict[str, Any]:
    """Run ``system`` over a backlog of ``count`` traces with an instant judge.

    Reports verdicts per CPU-second of the system's process (from its first verdict to its
    last, so interpreter start-up is left out), and its RSS every second.
    """
    judge = await start_judge(bench, 0.0) if system != BARE else None
    verdicts = await bench.topic(f"verdicts-{system}")
    spec = RunSpec(system, traces_topic, verdicts, dlq, bench.name(f"group-{system}"),
                   judge.url if judge else "http://127.0.0.1:9/v1", concurrency=concurrency,
                   profile_to=profile_to, log_level=log_level)
    child = start_system(bench, spec)
    sampler = asyncio.create_task(child.sample_rss(1.0))
    progress: list[tuple[float, int]] = []
    try:
        async with OffsetWatch(bench.bootstrap, verdicts) as watch:
            deadline = time.monotonic() + FIRST_VERDICT_TIMEOUT_S
            while await watch.count() == 0:
                if not child.alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"{system} produced nothing:\n{child.log_tail()}")
                await asyncio.sleep(0.05)
            first_at, cpu_first = time.monotonic(), child.cpu_s()
            done = 0
            while done < count and time.monotonic() - first_at < cap_s:
                await asyncio.sleep(0.5)
                done = await watch.count()
                progress.append((round(time.monotonic() - first_at, 2), done))
                if not child.alive():
                    raise RuntimeError(f"{system} exited early:\n{child.log_tail()}")
            done_at, cpu_done = time.monotonic(), child.cpu_s()
            memory = child.memory()
    finally:
        sampler.cancel()
        await child.stop(grace_s=180 if profile_to else 15)
        if judge is not None:
            await judge.stop()
    elapsed_s = done_at - first_at
    rss = [(round(t - (first_at - child.started_at), 1), round(mb, 1))
           for t, mb in child.rss_samples]
    return {
        "system": system,
        "backlog": count,
        "verdicts": done,
        "finished": done >= count,
        "elapsed_s": round(elapsed_s, 1),
        "verdicts_per_s": round(done / elapsed_s, 1),
        "cpu_s": round(cpu_done - cpu_first, 2),
        "verdicts_per_cpu_s": round(done / max(cpu_done - cpu_first, 1e-9), 1),
        "peak_rss_mb": round(memory.get("VmHWM", 0.0), 1),
        "rss_slope_mb_per_min": _slope_per_min(rss),
        "rss_mb": rss,
        "progress": progress[:: max(1, len(progress) // 200)],
    }


def _slope_per_min(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of RSS (MB per minute) after the first fifth of the run."""
    if len(samples) < 5:
        return None
    end = samples[-1][0]
    steady = [(t, mb) for t, mb in samples if t >= end / 5]
    if len(steady) < 3:
        return None
    n = len(steady)
    mean_t = sum(t for t, _ in steady) / n
    mean_mb = sum(mb for _, mb in steady) / n
    var = sum((t - mean_t) ** 2 for t, _ in steady)
    if var == 0:
        return None
    cov = sum((t - mean_t) * (mb - mean_mb) for t, mb in steady)
    return round(cov / var * 60, 3)


async def judge_capacity(
    bench: Bench, server: str, *, latency_s: float, concurrency: int, duration_s: float
) -> dict[str, Any]:
    """Drive a fake judge with the worker's own judge client (no Kafka): the rate it reaches,
    and the judge's CPU per call. At a fixed latency this is the ceiling the worker can meet."""
    judge = await start_judge(bench, latency_s, server)
    trace = decode_trace(json.dumps(next(traces(1))).encode())
    request = build_request(trace, Limits())
    client = build_judge("bench-key", judge.url, "bench-judge", timeout_s=30.0,
                         max_concurrency=concurrency, requests_per_minute=None,
                         tokens_per_minute=None)
    latencies: list[float] = []
    completed, errors = [0], [0]
    warmup_s = 3.0  # 64 connections to open and the first calls to settle
    started = time.monotonic()
    counting_from, end = started + warmup_s, started + warmup_s + duration_s

    async def caller() -> None:
        while (now := time.monotonic()) < end:
            result = await client.judge(request)
            if isinstance(result, TraceFailed):
                errors[0] += 1  # e.g. a connection the judge server did not take
                continue
            completed[0] += 1
            if now >= counting_from:
                latencies.append(time.monotonic() - now)

    try:
        cpu_before = judge.child.cpu_s()
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        cpu_used = judge.child.cpu_s() - cpu_before
    finally:
        await client.close()
        await judge.stop()
    latencies.sort()
    bound = concurrency / latency_s if latency_s > 0 else None
    rate = len(latencies) / duration_s
    return {
        "server": server,
        "latency_s": latency_s,
        "concurrency": concurrency,
        "requests_per_s": round(rate, 1),
        "littles_law_bound": bound,
        "efficiency": round(rate / bound, 3) if bound else None,
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 1) if latencies else None,
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 1) if latencies else None,
        "errors": errors[0],
        "server_cpu_ms_per_call": round(cpu_used / max(completed[0], 1) * 1000, 3),
    }

