"""``make bench``: the worker and two baselines side by side on the real broker, and the targets.

    python -m benchmarks.run [--quick] [--only throughput,hangs,...] [--repeat N]
                             [--baseline benchmarks/results/latest.json] [--memory-cap S]
    python -m benchmarks.run --median run1.json run2.json run3.json

Writes ``benchmarks/results/latest.json`` and ``latest.md`` and draws
``docs/bench-throughput.png``. Scenarios: ``judge`` (the fake judges' own capacity),
``throughput`` (the sweep over judge concurrency), ``hangs`` (1% of calls hang until the
timeout), ``startup``, ``rate`` (requests-per-minute limit), ``memory`` (a long backlog with
an instant judge: peak RSS, RSS slope, and cost per verdict against a bare loop); on OTLP
spans (``TRACES_FORMAT=otlp_proto``, ``span_run.py``): ``spans`` (span throughput against a
bare read loop, and the one-core ceiling), ``spans_memory`` (RSS with ``MAX_OPEN_TRACES``
open), ``spans_delay`` (a trace's last span to its verdict). Only when named in ``--only``
(fault behaviour, not speed; some minutes each), the redone work of ``redo.py``:
``redo_kills`` (paid judge calls per trace under SIGKILLs), ``redo_rebalance`` (expulsions
and duplicates as a group scales 3 -> 4 -> 3), and ``account`` (replicas sharing one judge
account's limit: ``benchmarks/account.py``).
Figures depend on the machine and on whatever else runs on it: compare runs made together.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks import capacity, scenarios
from benchmarks.account_figures import table as account_table
from benchmarks.kafka import Backlog, fill
from benchmarks.procs import machine_load
from benchmarks.redo import REDO_DEFAULT, REDO_QUICK, REDO_SCENARIOS, run_redo
from benchmarks.report import compare, markdown, medians, plot, write_json
from benchmarks.scenarios import Window
from benchmarks.span_run import SPAN_DEFAULT, SPAN_QUICK, SPAN_SCENARIOS, run_spans
from benchmarks.systems import BARE, BATCH_GATHER, SEQUENTIAL, WORKER, Bench
from benchmarks.targets import evaluate, hang_ceiling, max_timeout_for
from scripts.kafka.broker import kafka_bootstrap

ROOT = Path(__file__).resolve().parent.parent
TRACE_SCENARIOS = ("judge", "throughput", "hangs", "startup", "rate", "memory")
DEFAULT_SCENARIOS = (*TRACE_SCENARIOS, *SPAN_SCENARIOS)  # what a run without --only runs
SCENARIOS = (*DEFAULT_SCENARIOS, *REDO_SCENARIOS, "account")  # the rest only when named
PARTITIONS = 6
JITTER = 0.2  # the what-if point: judge latency uniform in latency * (1 +- JITTER)


@dataclass(frozen=True)
class Sizes:
    """Everything a run's length depends on."""

    sweep: tuple[int, ...]
    window: Window
    hang_window: Window  # warm-up as long as the timeout: hung calls reach a steady state
    sequential_hang_window: Window  # one hang per 100 traces is 60 s of a sequential loop
    memory_backlog: int
    memory_cap_s: float
    bare_cap_s: float
    rate_per_minute: int
    rate_duration_s: float
    startup_repeats: int
    judge_check_s: float
    account_traces: int = 1200  # at 600/min, a steady part of over a minute
    account_replicas: tuple[int, ...] = (1, 3, 4)
    latency_s: float = 0.5
    target_concurrency: int = 64
    hang_timeout_s: float = 10.0
    hang_every: int = 100


DEFAULT = Sizes(
    sweep=(16, 64, 128), window=Window(3.0, 10.0), hang_window=Window(10.0, 30.0),
    sequential_hang_window=Window(3.0, 60.0),
    memory_backlog=200_000,
    memory_cap_s=120.0, bare_cap_s=120.0, rate_per_minute=1200, rate_duration_s=65.0,
    startup_repeats=3, judge_check_s=6.0,
)
QUICK = Sizes(
    sweep=(16, 64), window=Window(2.0, 5.0), hang_window=Window(5.0, 10.0),
    sequential_hang_window=Window(2.0, 10.0),
    memory_backlog=10_000, memory_cap_s=25.0,
    bare_cap_s=30.0, rate_per_minute=3000, rate_duration_s=15.0, startup_repeats=1,
    judge_check_s=3.0, account_traces=300,
)


def say(message: str) -> None:
    """Progress on stdout, as it happens."""
    print(message, flush=True)


async def _repeated(times: int, measure: Any) -> dict[str, Any]:
    """Run ``measure()`` ``times`` times; the point's rate is the median."""
    runs = [await measure() for _ in range(times)]
    point = dict(runs[len(runs) // 2])
    point["verdicts_per_s"] = round(median(r["verdicts_per_s"] for r in runs), 2)
    if times > 1:
        point["runs_verdicts_per_s"] = [r["verdicts_per_s"] for r in runs]
    return point


async def judge_check(bench: Bench, sizes: Sizes) -> list[dict[str, Any]]:
    """Can a fake judge itself serve 64 slots at 0.5 s, and what does a call cost it?"""
    checks = []
    for server in ("asyncio", "threading"):
        for latency_s in (sizes.latency_s, 0.0):
            check = await capacity.judge_capacity(
                bench, server, latency_s=latency_s, concurrency=sizes.target_concurrency,
                duration_s=sizes.judge_check_s,
            )
            checks.append(check)
            eff = f", {check['efficiency']:.3f} of the bound" if check["efficiency"] else ""
            say(f"  judge {server:9} latency {latency_s:g} s: {check['requests_per_s']:.1f} "
                f"req/s{eff}; p50 {check['p50_ms']} ms, p99 {check['p99_ms']} ms; "
                f"{check['server_cpu_ms_per_call']:.2f} ms server CPU per call; "
                f"{check['errors']} errors")
    return checks


async def sweep(
    bench: Bench, sizes: Sizes, traces: str, dlq: str, backlog: int, repeat: int
) -> dict[str, Any]:
    """Throughput against concurrency: the worker, batch-gather, and sequential once."""
    points = []
    plan = [(WORKER, c, 0.0) for c in sizes.sweep] + [(BATCH_GATHER, c, 0.0) for c in sizes.sweep]
    plan.append((SEQUENTIAL, 1, 0.0))
    # A what-if beside the fixed latency: real judges vary, which breaks the lockstep in
    # which a fixed-latency judge answers every call sent in the same millisecond.
    plan.append((WORKER, sizes.target_concurrency, JITTER))
    for system, concurrency, jitter in plan:
        async def measure(
            system: str = system, concurrency: int = concurrency, jitter: float = jitter
        ) -> Any:
            return await scenarios.throughput(
                bench, system, traces, dlq, latency_s=sizes.latency_s,
                concurrency=concurrency, window=sizes.window, backlog=backlog, jitter=jitter,
            )
        point = await _repeated(repeat, measure)
        points.append(point)
        label = f"{system} ±{jitter:.0%}" if jitter else system
        say(f"  {label:12} {concurrency:4}: {point['verdicts_per_s']:7.1f} verdicts/s = "
            f"{point['verdicts_per_s'] / point['littles_law_bound']:.3f} of "
            f"{point['littles_law_bound']:g}; {point['cpu_cores_used']:.2f} cores"
            + ("  (ran dry!)" if point["ran_dry"] else ""))
    return {"latency_s": sizes.latency_s, "points": points}


async def hangs(
    bench: Bench, sizes: Sizes, traces: str, plain: str, dlq: str, backlog: int, repeat: int,
    without: dict[str, float],
) -> dict[str, Any]:
    """1% of calls hang until the timeout: each system against its own no-hang rate."""
    c, timeout_s = sizes.target_concurrency, sizes.hang_timeout_s
    ceiling = hang_ceiling(sizes.latency_s, timeout_s, 1 / sizes.hang_every)
    say(f"  hard-cap ceiling: {sizes.latency_s:g} / (0.99 x {sizes.latency_s:g} + 0.01 x "
        f"{timeout_s:g}) = {ceiling:.3f} of the no-hang rate "
        f"({c / sizes.latency_s * ceiling:.1f}/s at {c} slots); 0.9 needs a timeout <= "
        f"{max_timeout_for(0.9, sizes.latency_s, 1 / sizes.hang_every):.1f} s")
    points, ratios = [], {}
    for system in (WORKER, BATCH_GATHER, SEQUENTIAL):
        concurrency = 1 if system == SEQUENTIAL else c
        if system not in without:
            no_hangs = await scenarios.throughput(
                bench, system, plain, dlq,
                latency_s=sizes.latency_s, concurrency=concurrency, window=sizes.hang_window,
                backlog=backlog,
            )
            without[system] = no_hangs["verdicts_per_s"]

        async def measure(system: str = system, concurrency: int = concurrency) -> Any:
            return await scenarios.throughput(
                bench, system, traces, dlq, latency_s=sizes.latency_s,
                concurrency=concurrency, timeout_s=timeout_s, backlog=backlog,
                window=sizes.sequential_hang_window if system == SEQUENTIAL
                else sizes.hang_window,
            )
        point = await _repeated(repeat, measure)
        points.append(point)
        ratios[system] = round(point["verdicts_per_s"] / without[system], 4)
        say(f"  {system:12} {concurrency:4}: {point['verdicts_per_s']:7.1f} verdicts/s with "
            f"hangs vs {without[system]:.1f} without = {ratios[system]:.3f} "
            f"({point['errors_in_window']} timeouts in the window)")
    return {"concurrency": c, "timeout_s": timeout_s, "hang_share": 1 / sizes.hang_every,
            "ceiling": round(ceiling, 4), "points": points, "ratios": ratios,
            "without": without}


async def memory_and_cost(
    bench: Bench, sizes: Sizes, traces: str, dlq: str, memory_cap_s: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The worker over the big backlog (instant judge), then the bare loop over the same."""
    worker = await capacity.drain_backlog(
        bench, WORKER, traces, dlq, count=sizes.memory_backlog,
        concurrency=sizes.target_concurrency, cap_s=memory_cap_s or 1e9,
    )
    say(f"  worker: {worker['verdicts']} of {worker['backlog']} in {worker['elapsed_s']} s "
        f"({worker['verdicts_per_s']}/s); peak RSS {worker['peak_rss_mb']} MB, slope "
        f"{worker['rss_slope_mb_per_min']} MB/min; {worker['verdicts_per_cpu_s']} verdicts "
        f"per CPU-s")
    bare = await capacity.drain_backlog(
        bench, BARE, traces, dlq, count=sizes.memory_backlog, concurrency=1,
        cap_s=sizes.bare_cap_s,
    )
    ratio = worker["verdicts_per_cpu_s"] / bare["verdicts_per_cpu_s"]
    say(f"  bare loop: {bare['verdicts']} records in {bare['elapsed_s']} s, "
        f"{bare['verdicts_per_cpu_s']} per CPU-s, peak RSS {bare['peak_rss_mb']} MB; "
        f"worker/bare cost ratio {ratio:.4f} ({1 / ratio:.0f}x the CPU per record)")
    cost = {
        "worker_verdicts_per_cpu_s": worker["verdicts_per_cpu_s"],
        "worker_cpu_ms_per_verdict": round(1000 / worker["verdicts_per_cpu_s"], 3),
        "bare_records_per_cpu_s": bare["verdicts_per_cpu_s"],
        "bare_cpu_ms_per_record": round(1000 / bare["verdicts_per_cpu_s"], 4),
        "ratio": round(ratio, 5),
        "bare": {k: v for k, v in bare.items() if k not in ("rss_mb", "progress")},
    }
    return worker, cost


async def _account(bench: Bench, sizes: Sizes) -> list[dict[str, Any]]:
    """Replicas sharing one account of 600 requests a minute (``benchmarks/account.py``)."""
    from benchmarks import account  # it drives the workers with the tests' own helpers

    say("replicas sharing one judge account:")
    planned = [account.Plan(replicas=n, traces=sizes.account_traces, rpm=600, latency_s=0.3,
                            concurrency=16, headers=True, full=False)
               for n in sizes.account_replicas]
    runs = await account.run_plans(bench.bootstrap, planned, bench.log_dir / "account")
    say(account_table(runs))
    return runs


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                             capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "consumer"], cwd=ROOT,
                               check=True, capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + ("+dirty consumer/" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every selected scenario, in order; the results as one dict."""
    sizes = QUICK if args.quick else DEFAULT
    chosen = set(args.only.split(",")) if args.only else set(DEFAULT_SCENARIOS)
    unknown = chosen - set(SCENARIOS)
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    log_dir = Path(tempfile.mkdtemp(prefix="groundedness-bench-"))
    bench = Bench(kafka_bootstrap()[0], time.strftime("%m%d%H%M%S") + uuid.uuid4().hex[:4], log_dir)
    started = time.monotonic()
    results: dict[str, Any] = {
        "meta": {
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "mode": "quick" if args.quick else "default",
            "commit": _git_commit(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": machine_load(),
            "scenarios": sorted(chosen),
            "logs": str(log_dir),
        },
        "config": {"latency_s": sizes.latency_s, "target_concurrency": sizes.target_concurrency,
                   "hang_timeout_s": sizes.hang_timeout_s, "hang_every": sizes.hang_every,
                   "partitions": PARTITIONS, "warmup_s": sizes.window.warmup_s,
                   "window_s": sizes.window.window_s},
    }
    say(f"benchmark {bench.tag}: broker {bench.bootstrap}, {os.cpu_count()} cores, load "
        f"{results['meta']['load_before'][0]:.2f}; logs in {log_dir}")
    sweep_backlog = int(max((*sizes.sweep, sizes.target_concurrency)) / sizes.latency_s
                        * (sizes.window.warmup_s + sizes.window.window_s + 10) * 1.3)
    plain_count = max(sweep_backlog, sizes.memory_backlog if "memory" in chosen else 0, 2000)
    hang_count = int(sizes.target_concurrency / sizes.latency_s
                     * (sizes.hang_window.warmup_s + sizes.hang_window.window_s + 10) * 1.3)
    try:
        dlq = await bench.topic("dlq")
        plain = ""
        if chosen & {"throughput", "hangs", "startup", "rate", "memory"}:
            plain = await bench.topic("plain", PARTITIONS)
            t0 = time.monotonic()
            size = await fill(bench.bootstrap, Backlog(plain, plain_count, PARTITIONS))
            say(f"backlog: {plain_count} traces ({size / plain_count:.0f} bytes each on "
                f"average) in {time.monotonic() - t0:.1f} s")
        if "judge" in chosen:
            say("fake judge capacity (the worker's judge client, 64 concurrent, no Kafka):")
            results["judge_check"] = await judge_check(bench, sizes)
        without: dict[str, float] = {}
        if "throughput" in chosen:
            say(f"throughput, judge latency {sizes.latency_s:g} s:")
            results["throughput"] = await sweep(bench, sizes, plain, dlq, plain_count,
                                                args.repeat)
            for point in results["throughput"]["points"]:
                if point["concurrency"] in (sizes.target_concurrency, 1) and not point["jitter"]:
                    without.setdefault(point["system"], point["verdicts_per_s"])
        if "hangs" in chosen:
            hang_topic = await bench.topic("hangs", PARTITIONS)
            await fill(bench.bootstrap, Backlog(hang_topic, hang_count, PARTITIONS,
                                                sizes.hang_every))
            say(f"1% hangs until a {sizes.hang_timeout_s:g} s timeout:")
            results["hangs"] = await hangs(bench, sizes, hang_topic, plain, dlq, hang_count,
                                           args.repeat, without)
        if "startup" in chosen:
            results["startup"] = await scenarios.startup(bench, plain, dlq,
                                                         sizes.startup_repeats)
            say(f"startup: first judge call {results['startup']['first_judge_call_s']:.2f} s "
                f"after spawn (runs: {results['startup']['runs']})")
        if "rate" in chosen:
            say(f"rate limit {sizes.rate_per_minute}/min, 50 ms judge, "
                f"{sizes.rate_duration_s:g} s:")
            rate = await scenarios.rate_limit(
                bench, plain, dlq, requests_per_minute=sizes.rate_per_minute,
                latency_s=0.05, duration_s=sizes.rate_duration_s,
            )
            results["rate_limit"] = rate
            say(f"  {rate['calls']} calls; busiest {rate['window_s']:g} s window "
                f"{rate['busiest_window_calls']} (allowed {rate['allowed_per_window']:g}"
                + ("" if rate["window_s"] >= 60 else ", scaled: a run under 60 s")
                + f"); utilisation {rate['utilisation']:.3f}")
        if "memory" in chosen:
            say(f"memory and cost: backlog of {sizes.memory_backlog} traces, instant judge "
                f"(cap {args.memory_cap if args.memory_cap is not None else sizes.memory_cap_s:g}"
                f" s; 0 = none):")
            cap = args.memory_cap if args.memory_cap is not None else sizes.memory_cap_s
            results["memory"], results["cost"] = await memory_and_cost(
                bench, sizes, plain, dlq, cap
            )
        if "account" in chosen:
            results["account"] = await _account(bench, sizes)
        if chosen & set(SPAN_SCENARIOS):
            results |= await run_spans(bench, SPAN_QUICK if args.quick else SPAN_DEFAULT,
                                       chosen, dlq, say)
        if chosen & set(REDO_SCENARIOS):
            results |= await run_redo(bench, REDO_QUICK if args.quick else REDO_DEFAULT,
                                      chosen, say)
    finally:
        await bench.cleanup()
    results["meta"]["load_after"] = machine_load()
    results["meta"]["duration_s"] = round(time.monotonic() - started, 1)
    results["targets"] = evaluate(results)
    return results


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, write the results, print the targets (and the comparison)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(SCENARIOS)}")
    parser.add_argument("--repeat", type=int, default=1,
                        help="measure each throughput point N times; report the median")
    parser.add_argument("--baseline", type=Path, help="a previous results JSON to compare with")
    parser.add_argument("--memory-cap", type=float, default=None,
                        help="seconds to let the worker drain the backlog (0: until done)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results",
                        help="directory for latest.json and latest.md")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "bench-throughput.png")
    parser.add_argument("--render", type=Path, metavar="JSON",
                        help="measure nothing: redraw the table and plot from a results JSON")
    parser.add_argument("--median", type=Path, nargs="+", metavar="JSON",
                        help="measure nothing: each target's median over these results JSONs "
                             "(written to median.md beside latest.md)")
    args = parser.parse_args(argv)
    if args.median:
        table = medians([json.loads(path.read_text()) for path in args.median])
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "median.md").write_text(table)
        say(table)
        return 0
    baseline = json.loads(args.baseline.read_text()) if args.baseline else None
    if args.render:
        results = json.loads(args.render.read_text())
        results["targets"] = evaluate(results)
    else:
        results = asyncio.run(run(args))
    write_json(results, args.out / "latest.json")
    table = markdown(results)
    (args.out / "latest.md").write_text(table)
    if "throughput" in results:
        plot(results, args.plot)
    say("")
    say(table)
    if baseline is not None:
        say(f"against {args.baseline}:")
        say(compare(results, baseline))
    say(f"results: {args.out / 'latest.json'}, {args.out / 'latest.md'}"
        + (f", {args.plot}" if "throughput" in results else "")
        + f" ({results['meta']['duration_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
