"""The measurements: throughput in a fixed window, startup, the rate limit, cost and memory.

Throughput is read from the verdicts topic afterwards, from each verdict's producer
timestamp, so watching a run costs the systems nothing: a run starts with a backlog already
in the traces topic, and the verdicts stamped in ``[first + warmup, first + warmup + window]``
count. CPU time and memory come from ``/proc`` of the system's own process.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from itertools import pairwise
from statistics import median
from typing import Any

from benchmarks.kafka import OffsetWatch, verdict_times
from benchmarks.procs import Child
from benchmarks.systems import WORKER, Bench, Judge, RunSpec, start_judge, start_system

FIRST_VERDICT_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Window:
    """How long a throughput run warms up and then counts."""

    warmup_s: float
    window_s: float


async def _spec(
    bench: Bench, system: str, traces: str, judge: Judge, dlq: str, **options: Any
) -> RunSpec:
    verdicts = await bench.topic(f"verdicts-{system}")
    return RunSpec(system, traces, verdicts, dlq, bench.name(f"group-{system}"), judge.url,
                   **options)


async def _wait_for(
    watch: OffsetWatch, child: Child, at_least: int, timeout_s: float
) -> tuple[float, int]:
    """Poll until the verdicts topic holds ``at_least`` records; (when, how many)."""
    deadline = time.monotonic() + timeout_s
    while True:
        count = await watch.count()
        if count >= at_least or time.monotonic() > deadline:
            return time.monotonic(), count
        if not child.alive():
            raise RuntimeError(f"{child.name} exited early:\n{child.log_tail()}")
        await asyncio.sleep(0.1)


async def throughput(
    bench: Bench, system: str, traces: str, dlq: str, *, latency_s: float, concurrency: int,
    window: Window, timeout_s: float = 30.0, backlog: int, jitter: float = 0.0,
) -> dict[str, Any]:
    """Verdicts per second of one system in steady state, against a judge of fixed latency."""
    judge = await start_judge(bench, latency_s, jitter=jitter)
    spec = await _spec(bench, system, traces, judge, dlq, concurrency=concurrency,
                       timeout_s=timeout_s)
    child = start_system(bench, spec)
    try:
        async with OffsetWatch(bench.bootstrap, spec.verdicts_topic) as watch:
            await _wait_for(watch, child, 1, FIRST_VERDICT_TIMEOUT_S)
            await asyncio.sleep(window.warmup_s)
            cpu_start, wall_start = child.cpu_s(), time.monotonic()
            await asyncio.sleep(window.window_s)
            cpu_s, wall_s = child.cpu_s() - cpu_start, time.monotonic() - wall_start
            await asyncio.sleep(0.5)
            produced = await watch.count()
        memory = child.memory()
    finally:
        await child.stop()
        calls = (await judge.stats())["count"]
        await judge.stop()
    stamped = await verdict_times(bench.bootstrap, spec.verdicts_topic, values=True)
    first = min(at for at, _ in stamped)
    start, end = first + window.warmup_s, first + window.warmup_s + window.window_s
    counted = [value for at, value in stamped if start <= at < end]
    errors = sum(1 for value in counted if value and b'"verdict":"error"' in value.replace(
        b" ", b""))
    rate = len(counted) / window.window_s
    return {
        "system": system,
        "concurrency": concurrency,
        "latency_s": latency_s,
        "jitter": jitter,
        "timeout_s": timeout_s,
        "verdicts_per_s": round(rate, 2),
        "littles_law_bound": (round(concurrency / latency_s, 2) if system != "sequential"
                              else round(1 / latency_s, 2)),
        "verdicts_in_window": len(counted),
        "errors_in_window": errors,
        "window_s": window.window_s,
        "warmup_s": window.warmup_s,
        "verdicts_total": len(stamped),
        "judge_calls": calls,
        "ran_dry": produced >= backlog,
        "cpu_s_in_window": round(cpu_s, 2),
        "cpu_cores_used": round(cpu_s / wall_s, 3),
        "rss_mb": round(memory.get("VmRSS", 0.0), 1),
    }


async def startup(bench: Bench, traces: str, dlq: str, repeats: int) -> dict[str, Any]:
    """Seconds from spawning ``groundedness run`` (traces waiting) to the first judge call."""
    runs: list[dict[str, float]] = []
    for _ in range(repeats):
        judge = await start_judge(bench, 0.0)
        spec = await _spec(bench, WORKER, traces, judge, dlq, concurrency=16)
        wall_at_spawn = time.time()
        child = start_system(bench, spec)
        try:
            first_at = None
            deadline = time.monotonic() + FIRST_VERDICT_TIMEOUT_S
            while first_at is None and time.monotonic() < deadline:
                first_at = (await judge.stats())["first_at"]
                if not child.alive():
                    raise RuntimeError(f"the worker exited early:\n{child.log_tail()}")
                await asyncio.sleep(0.02)
        finally:
            await child.stop()
            await judge.stop()
        if first_at is None:
            raise RuntimeError("the worker made no judge call within the timeout")
        run = {"first_judge_call_s": round(first_at - child.started_at, 3)}
        run |= _log_marks(child, wall_at_spawn)
        runs.append(run)
    return {
        "runs": runs,
        "first_judge_call_s": median(r["first_judge_call_s"] for r in runs),
    }


def _log_marks(child: Child, wall_at_spawn: float) -> dict[str, float]:
    """Seconds from spawn to the worker's own start and assignment log events."""
    from datetime import datetime

    marks: dict[str, float] = {}
    wanted = {"worker_starting": "logging_started_s", "partitions_assigned": "assigned_s"}
    for line in child.log_path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        key = wanted.get(event.get("event", ""))
        if key and key not in marks and "timestamp" in event:
            at = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
            marks[key] = round(at - wall_at_spawn, 3)
    return marks


async def rate_limit(
    bench: Bench, traces: str, dlq: str, *, requests_per_minute: int, latency_s: float,
    duration_s: float,
) -> dict[str, Any]:
    """Judge calls under ``JUDGE_REQUESTS_PER_MINUTE``, from the judge's own arrival times."""
    judge = await start_judge(bench, latency_s)
    spec = await _spec(bench, WORKER, traces, judge, dlq, concurrency=16,
                       requests_per_minute=requests_per_minute)
    child = start_system(bench, spec)
    try:
        while (await judge.stats())["first_at"] is None:
            if not child.alive():
                raise RuntimeError(f"the worker exited early:\n{child.log_tail()}")
            await asyncio.sleep(0.05)
        await asyncio.sleep(duration_s)
        arrivals = [float(at) for at in (await judge.stats(arrivals=True))["arrivals"]]
    finally:
        await child.stop()
        await judge.stop()
    first = arrivals[0]
    arrivals = [at for at in arrivals if at < first + duration_s]
    window_s = min(60.0, duration_s)
    # Under 60 s (quick runs) the limiter's one-second burst is part of what any window sees.
    allowed = requests_per_minute / 60 * (window_s if window_s >= 60 else window_s + 1)
    busiest, busiest_start = _busiest_window(arrivals, window_s)
    first_window = sum(1 for at in arrivals if at < first + window_s)
    per_second = [sum(1 for at in arrivals if first + s <= at < first + s + 1) for s in range(5)]
    return {
        "requests_per_minute": requests_per_minute,
        "judge_latency_s": latency_s,
        "duration_s": duration_s,
        "calls": len(arrivals),
        "window_s": window_s,
        "allowed_per_window": round(allowed, 1),
        "busiest_window_calls": busiest,
        "busiest_window_starts_s": round(busiest_start - first, 3),
        "first_seconds_calls": per_second,  # the limiter's one-second burst shows here
        "first_gaps_ms": [round((b - a) * 1000, 1) for a, b in pairwise(arrivals[:6])],
        "first_window_calls": first_window,
        "within_limit": busiest <= allowed,
        "utilisation": round(first_window / allowed, 4),
    }


def _busiest_window(arrivals: list[float], window_s: float) -> tuple[int, float]:
    """The most arrivals in any window of ``window_s``, and where it starts (two pointers)."""
    best, start, low = 0, arrivals[0] if arrivals else 0.0, 0
    for high, at in enumerate(arrivals):
        while arrivals[low] <= at - window_s:
            low += 1
        if high - low + 1 > best:
            best, start = high - low + 1, arrivals[low]
    return best, start
