"""Worker replicas that share one judge account (issue 25): 429s, utilisation, breaker trips.

    python -m benchmarks.account [--replicas 1,3,4] [--traces 1200] [--rpm 600] [--churn 3]
                                 [--latency 0.3] [--concurrency 16] [--start-full]
                                 [--no-headers] [--json PATH]

For each replica count, that many real ``groundedness run`` processes in one consumer group
drain a fresh 12-partition topic of trace_json events against one fake judge: the scripted
judge (0.3 s a call) behind ``AccountLimits``, an account-wide limit of ``--rpm`` requests a
minute, with OpenAI's 429s and headers (``--no-headers``: vLLM's, a bare Retry-After). Each
replica is configured as a user who read the docs would: ``JUDGE_REQUESTS_PER_MINUTE`` = the
account's limit, ``JUDGE_MAX_CONCURRENCY=16``. ``--churn N`` adds a run of N replicas with one
more started at 30% of the verdicts and one SIGTERMed at 65%. The figures (429s, utilisation
in the steady part, circuit openings, missing and error verdicts, time to a verdict) are
``account_figures.py``'s; a table side by side, then the JSON.

The account starts empty unless ``--start-full``: a long backlog's steady state is an account
kept saturated, not the minute's burst an idle one grants first (at 1,200 traces that burst
would be half the run). The workers run this checkout's code (``PYTHONPATH``: checked first).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.account_figures import log_figures, table, utilisation, verdict_figures
from benchmarks.kafka import delete_topics
from consumer.localjudge.account import AccountLimits
from consumer.localjudge.server import JudgeServer
from scripts.kafka.broker import kafka_bootstrap
from tests.support.fake_judge import ScriptedJudge
from tests.support.streams import Topics, create_topics, produce
from tests.support.workers import (
    GROUNDEDNESS,
    REPO_ROOT,
    VerdictCollector,
    WorkerPool,
    scored_stream,
    worker_env,
)

PARTITIONS = 12
MODEL = "scripted-judge"  # what worker_env configures
CHURN_ADD_AT, CHURN_STOP_AT = 0.30, 0.65  # shares of the verdicts in
PROGRESS_EVERY_S = 10.0


@dataclass(frozen=True, slots=True)
class Plan:
    """One run: how many replicas against which account, over how many traces."""

    replicas: int
    traces: int
    rpm: int
    latency_s: float
    concurrency: int
    headers: bool
    full: bool
    churn: bool = False
    timeout_s: float = 900.0

    @property
    def label(self) -> str:
        """``3``, or ``3+1-1`` for a churn run."""
        return f"{self.replicas}+1-1" if self.churn else str(self.replicas)


def say(message: str) -> None:
    """Progress on stdout, as it happens."""
    print(message, flush=True)


def worker_pythonpath() -> str:
    """``PYTHONPATH`` for the workers: this checkout first (the venv's editable install may
    point at another one), after checking that the console script's interpreter obeys it."""
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    found = subprocess.run(
        [str(GROUNDEDNESS.parent / "python"), "-c", "import consumer; print(consumer.__file__)"],
        env=os.environ | {"PYTHONPATH": path}, cwd="/", capture_output=True, text=True,
        check=True,
    ).stdout.strip()
    if not found.startswith(str(REPO_ROOT)):
        raise SystemExit(f"the workers would import {found}, not {REPO_ROOT}'s code")
    say(f"workers import {found}")
    return path


async def measure(bootstrap: str, plan: Plan, log_dir: Path, pythonpath: str) -> dict[str, Any]:
    """One run on fresh topics; its figures."""
    topics = Topics.fresh(f"bench-account-{plan.label.replace('+', 'p')}")
    await create_topics(bootstrap, topics, PARTITIONS)
    try:
        values, scores, _ = scored_stream(plan.traces, empty_every=plan.traces + 1)
        await produce(bootstrap, topics.traces, values)
        judge = ScriptedJudge()
        judge.latency_s = plan.latency_s
        created_at = time.monotonic()
        account = AccountLimits(judge, plan.rpm, headers=plan.headers, full=plan.full)
        with JudgeServer(account, models=(MODEL,)) as server:
            env = worker_env(
                topics.env(bootstrap), server.url, JUDGE_REQUESTS_PER_MINUTE=str(plan.rpm),
                JUDGE_MAX_CONCURRENCY=str(plan.concurrency), LOG_LEVEL="info",
                LOG_FORMAT="json", PYTHONPATH=pythonpath,
            )
            run_dir = log_dir / plan.label
            run_dir.mkdir(parents=True, exist_ok=True)
            async with (VerdictCollector(bootstrap, topics.verdicts) as collector,
                        WorkerPool(run_dir) as pool):
                started = time.monotonic()
                for _ in range(plan.replicas):
                    await pool.start(env)
                complete = await _watch(plan, collector, pool, account, env, set(scores),
                                        started)
                wall_s = time.monotonic() - started
                exits = [await worker.terminate() for worker in pool.running()]
                verdicts = list(collector.verdicts)
        stats = account.stats()
        events = [event for worker in pool.workers for event in worker.events()]
    finally:
        await delete_topics(bootstrap, [topics.traces, topics.verdicts, topics.dlq])
    first = min(stats.admitted_at, default=0.0)
    per_second = Counter(int(at - first) for at in stats.admitted_at)
    calls_429 = stats.statuses.get(429, 0)
    return {
        "label": plan.label, **asdict(plan), "complete": complete, "wall_s": round(wall_s, 1),
        "calls": stats.arrived, "calls_429": calls_429,
        "share_429": round(calls_429 / stats.arrived, 4) if stats.arrived else None,
        "answered_200": stats.answered, "rejected_by_code": stats.rejected,
        "limited_by": stats.limited_by, "probes": stats.probes,
        **utilisation(stats.admitted_at, plan.rpm, created_at, plan.full),
        **log_figures(events), **verdict_figures(verdicts, set(scores)),
        "exit_codes": exits,
        "admitted_per_second": [per_second.get(s, 0) for s in range(max(per_second, default=-1)
                                                                     + 1)],
        "logs": str(run_dir),
    }


async def _watch(
    plan: Plan, collector: VerdictCollector, pool: WorkerPool, account: AccountLimits,
    env: dict[str, str], expected: set[str], started: float,
) -> bool:
    """Wait for every verdict (True), printing progress; in a churn run add and stop one."""
    stopping: list[asyncio.Task[int]] = []
    added = False
    next_report = started + PROGRESS_EVERY_S
    while (now := time.monotonic()) < started + plan.timeout_s:
        done = len(collector.trace_ids() & expected)
        if plan.churn and not added and done >= CHURN_ADD_AT * len(expected):
            added = True
            await pool.start(env, name="worker-added")
            say(f"  [{plan.label}] {now - started:.0f} s: a replica added")
        if plan.churn and not stopping and done >= CHURN_STOP_AT * len(expected):
            stopping.append(asyncio.create_task(pool.workers[0].terminate()))
            say(f"  [{plan.label}] {now - started:.0f} s: {pool.workers[0].name} SIGTERMed")
        if done == len(expected) or not pool.running():
            break
        if now >= next_report:
            next_report += PROGRESS_EVERY_S
            stats = account.stats()
            recent = stats.admitted_between(now - PROGRESS_EVERY_S, now) / PROGRESS_EVERY_S
            rejected = stats.statuses.get(429, 0)
            say(f"  [{plan.label}] {now - started:4.0f} s: {done}/{len(expected)} verdicts, "
                f"{stats.arrived} calls, {rejected} answered 429 "
                f"({rejected / max(1, stats.arrived):.0%}), {recent:.1f} admitted/s, "
                f"{len(pool.running())} replicas")
        await asyncio.sleep(0.5)
    await asyncio.gather(*stopping)
    return len(collector.trace_ids() & expected) == len(expected)


def plans(args: argparse.Namespace) -> list[Plan]:
    """The runs the command line asks for."""
    common = {"traces": args.traces, "rpm": args.rpm, "latency_s": args.latency,
              "concurrency": args.concurrency, "headers": not args.no_headers,
              "full": args.start_full, "timeout_s": args.timeout}
    planned = [Plan(replicas=int(n), **common) for n in args.replicas.split(",") if n]
    if args.churn:
        planned.append(Plan(replicas=args.churn, churn=True, **common))
    return planned


async def run_plans(bootstrap: str, planned: list[Plan], log_dir: Path) -> list[dict[str, Any]]:
    """Every planned run in turn, progress printed; their figures."""
    pythonpath = worker_pythonpath()
    first = planned[0]
    say(f"account: {first.rpm}/min, judge {first.latency_s:g} s, {first.traces} traces over "
        f"{PARTITIONS} partitions, broker {bootstrap}; logs in {log_dir}")
    results = []
    for plan in planned:
        say(f"{plan.label} replicas:")
        result = await measure(bootstrap, plan, log_dir, pythonpath)
        results.append(result)
        say(f"  done in {result['wall_s']:.0f} s: {result['calls_429']} of {result['calls']} "
            f"calls answered 429, utilisation {result['utilisation']}, "
            f"{result['circuit_openings']} circuit openings, {result['missing']} missing, "
            f"{result['errors']} errors")
    return results


def parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.account", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", default="1,3", help="replica counts (default: 1,3)")
    parser.add_argument("--traces", type=int, default=1200, help="traces a run (default: 1200)")
    parser.add_argument("--rpm", type=int, default=600, help="the account's requests a minute")
    parser.add_argument("--latency", type=float, default=0.3, help="judge seconds a call")
    parser.add_argument("--concurrency", type=int, default=16, help="JUDGE_MAX_CONCURRENCY")
    parser.add_argument("--churn", type=int, metavar="N",
                        help="also N replicas, one added at 30%% and one SIGTERMed at 65%%")
    parser.add_argument("--start-full", action="store_true",
                        help="the account starts full (idle before), not empty (saturated)")
    parser.add_argument("--no-headers", action="store_true",
                        help="a vLLM-like judge: no x-ratelimit-*, 429 with Retry-After only")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a run at most")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the JSON here")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run, print the table and the JSON."""
    args = parser().parse_args(argv)
    log_dir = Path(tempfile.mkdtemp(prefix="groundedness-bench-account-"))
    results = asyncio.run(run_plans(kafka_bootstrap()[0], plans(args), log_dir))
    say("")
    say(table(results))
    # Lists of numbers (admitted per second) on one line each: the JSON stays readable.
    text = re.sub(r"\[\s+([-\d.,\s]+?)\s+\]", lambda m: f"[{' '.join(m.group(1).split())}]",
                  json.dumps(results, indent=2))
    say(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0 if all(r["complete"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
