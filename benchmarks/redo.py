"""Redone work: what SIGKILLs and a scale-up/scale-down cost in judge calls and duplicates.

    python -m benchmarks.redo kills [--traces 1425] [--kills 5] [--json out.json]
    python -m benchmarks.redo rebalance [--traces 3000] [--partitions 12]
    make bench BENCH_ARGS="--only redo_kills,redo_rebalance"

``kills``: two workers in one group (at least once, 32 judge slots each) over a backlog of
traces; the judge answers in 0.2-0.5 s and every 7th scoring call with a 429 and a
Retry-After; one worker is SIGKILLed five times, restarted at once each time. The figures:
paid judge calls (200 answers) per judged trace (1.0 is no redone work), 429s, duplicate
verdict records, and what the broker and the workers logged of the group.

``rebalance``: three workers, a fourth joins, then it is SIGTERMed (3 -> 4 -> 3), under a
slow judge (2-4 s; ``--latency 1 2`` for a faster one), 12 partitions. The figures: members
expelled from the group (the broker's log when it is found, and the workers' commit and
heartbeat errors), partitions revoked, duplicate verdict records, the time until every
trace had a verdict, and the longest stretches without a verdict (the stalls).

A run that cannot finish within ``finish_timeout_s`` (a group that keeps expelling its
members) stops there and reports what it measured, ``seconds_until_all_judged`` None.

The judge is a ``Responder`` behind ``JudgeServer`` in this process, so it counts every
answer by status. Each worker gets ``PYTHONPATH`` set to this checkout, so a worktree
measures its own code even where the editable install points at another checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import sys
import tempfile
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from types import TracebackType
from typing import Any

from aiokafka import AIOKafkaConsumer

from benchmarks.group_watch import GroupWatch
from benchmarks.judge import MODEL  # the model start_system's workers ask for
from benchmarks.kafka import Backlog, fill
from benchmarks.procs import Child
from benchmarks.systems import WORKER, Bench, RunSpec, start_system
from consumer.judge.prompt import read_data
from consumer.localjudge.replies import Reply, completion, error_reply
from consumer.localjudge.server import JudgeServer
from scripts.kafka.broker import kafka_bootstrap

ROOT = Path(__file__).resolve().parent.parent
REDO_SCENARIOS = ("redo_kills", "redo_rebalance")
POLL_S = 0.1
RATE_LIMITED = "Rate limit reached for requests. Please try again."  # OpenAI's wording


@dataclass(frozen=True, slots=True)
class KillSizes:
    """The ``kills`` scenario's traffic, faults and judge."""

    traces: int = 1425
    partitions: int = 6
    kills: int = 5
    concurrency: int = 32
    latency_s: tuple[float, float] = (0.2, 0.5)
    fail_every: int = 7  # every n-th scoring call is a 429
    retry_after_s: float = 0.3  # what the 429 says (the tests' chaos setting)
    finish_timeout_s: float = 240.0  # from the first worker's start: then the run gives up


@dataclass(frozen=True, slots=True)
class RebalanceSizes:
    """The ``rebalance`` scenario's traffic, group sizes and judge."""

    traces: int = 3000
    partitions: int = 12
    replicas: int = 3  # then one more joins, then that one leaves (SIGTERM)
    concurrency: int = 32
    # A slow judge: a revoke waits for the work in flight (max_in_flight = 4 x the slots, so
    # about 4 x the latency), and with 2-4 s that outlasts aiokafka's default rebalance
    # timeout (10 s, its session timeout). At 1-2 s the revoke took some 5 s: no expulsion.
    latency_s: tuple[float, float] = (2.0, 4.0)
    finish_timeout_s: float = 240.0  # from the first worker's start: then the run gives up


@dataclass(frozen=True, slots=True)
class RedoSizes:
    """Both scenarios' sizes (``make bench`` picks the default or the quick ones)."""

    kills: KillSizes = field(default_factory=KillSizes)
    rebalance: RebalanceSizes = field(default_factory=RebalanceSizes)


REDO_DEFAULT = RedoSizes()
REDO_QUICK = RedoSizes(KillSizes(traces=600, kills=3), RebalanceSizes(traces=1200))


# -- the judge ----------------------------------------------------------------------------------


class RedoJudge:
    """A ``Responder``: a verdict after a latency drawn from ``latency_s``; every
    ``fail_every``-th scoring call a 429 with ``Retry-After`` (answered at once, as a rate
    limiter does). Probes (no ``groundedness@v1`` data) are answered and counted apart."""

    def __init__(self, latency_s: tuple[float, float], fail_every: int | None = None,
                 retry_after_s: float = 0.3, seed: int = 5) -> None:
        self.latency_s = latency_s
        self.fail_every = fail_every
        self.retry_after_s = retry_after_s
        self.statuses: Counter[int] = Counter()  # scoring calls by the status answered
        self.probes = 0
        self._random = random.Random(seed)
        self._lock = threading.Lock()  # the server's thread answers; this one reads

    def __call__(self, request: dict[str, Any]) -> Reply:
        """Answer one chat-completions request."""
        messages = request.get("messages")
        try:
            data = read_data(messages if isinstance(messages, list) else [])
        except ValueError:
            with self._lock:
                self.probes += 1
            return Reply(body=completion('{"ok": true}', MODEL, 1, 1))
        with self._lock:
            calls = sum(self.statuses.values()) + 1
            if self.fail_every and calls % self.fail_every == 0:
                self.statuses[429] += 1
                headers = {"Retry-After": f"{self.retry_after_s:g}"}
                return error_reply(429, RATE_LIMITED, "requests", "rate_limit_exceeded",
                                   headers=headers)
            self.statuses[200] += 1
            delay_s = self._random.uniform(*self.latency_s)
        score = zlib.crc32(str(data.get("answer", "")).encode()) % 5 + 1
        content = json.dumps({"score": score, "reason": f"redo verdict {score}",
                              "unsupported_claims": [] if score >= 4 else ["a claim"]})
        prompt_tokens = len(json.dumps(messages)) // 4
        return Reply(body=completion(content, MODEL, prompt_tokens, len(content) // 4),
                     delay_s=delay_s)

    def counts(self) -> dict[str, int]:
        """Scoring calls answered 200 and 429, and probes, so far."""
        with self._lock:
            return {"ok": self.statuses[200], "rate_limited": self.statuses[429],
                    "probes": self.probes}


# -- what came out ------------------------------------------------------------------------------


class VerdictReader:
    """Reads the verdicts topic from the start, in the background: each verdict's trace id,
    verdict and arrival (``time.monotonic()``)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap,
                                          auto_offset_reset="earliest", enable_auto_commit=False)
        self.verdicts: list[tuple[str, str, float]] = []
        self.first_at: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> VerdictReader:
        await self._consumer.start()
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._consumer.stop()

    async def _read(self) -> None:
        while True:
            batch = await self._consumer.getmany(timeout_ms=200)
            now = time.monotonic()
            for records in batch.values():
                for record in records:
                    verdict = json.loads(record.value or b"{}")
                    trace_id = str(verdict.get("trace_id"))
                    self.verdicts.append((trace_id, str(verdict.get("verdict")), now))
                    self.first_at.setdefault(trace_id, now)

    @property
    def judged(self) -> int:
        """Distinct traces with a verdict so far."""
        return len(self.first_at)


def verdict_figures(reader: VerdictReader, expected: int) -> dict[str, Any]:
    """Records, distinct traces, duplicates, errors and missing traces on the verdicts topic."""
    per_trace = Counter(trace_id for trace_id, _, _ in reader.verdicts)
    return {
        "verdict_records": len(reader.verdicts),
        "traces_judged": len(per_trace),
        "traces_missing": expected - len(per_trace),
        "duplicate_records": sum(n - 1 for n in per_trace.values()),
        "traces_with_duplicates": sum(1 for n in per_trace.values() if n > 1),
        "error_verdicts": sum(1 for _, verdict, _ in reader.verdicts if verdict == "error"),
    }


def longest_gaps(arrivals: Iterable[float], since: float, top: int = 3) -> list[list[float]]:
    """The ``top`` longest stretches without a verdict: [start s after ``since``, length s]."""
    times = sorted(arrivals)
    gaps = [(later - earlier, earlier) for earlier, later in pairwise(times)]
    return [[round(start - since, 1), round(length, 1)]
            for length, start in sorted(gaps, reverse=True)[:top]]


# -- what the workers and the broker logged ----------------------------------------------------

# Lines of a worker's log (its own JSON events, and aiokafka's through the same pipeline) that
# say the member was no longer in the group, or its commit was refused: what an expelled
# member logs.
WORKER_SIGNS: dict[str, Callable[[dict[str, Any], str], bool]] = {
    "revoke_commit_failed": lambda event, _: event.get("event") == "revoke_commit_failed",
    "commit_failed": lambda event, _: event.get("event") == "commit_failed",
    "unknown_member_id": lambda _, line: ("UnknownMemberId" in line
                                          or "member_id was not recognized" in line),
    "illegal_generation": lambda _, line: ("IllegalGeneration" in line
                                           or "generation id is not" in line),
    "rebalance_in_progress": lambda _, line: ("RebalanceInProgress" in line
                                              or "because it is rebalancing" in line),
}
EPISODE_S = 10.0  # the same member's signs within this many seconds are one episode


def _events(path: Path) -> list[tuple[dict[str, Any], str]]:
    found = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict):
                found.append((event, line))
    return found


def _at(event: dict[str, Any]) -> float | None:
    stamp = event.get("timestamp")
    if not isinstance(stamp, str):
        return None
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return None


def worker_log_figures(logs: Iterable[Path]) -> dict[str, Any]:
    """Counts of each sign in the workers' logs, the workers that lost their membership (an
    episode: unknown member id or illegal generation, once per ``EPISODE_S``), and the
    ``partitions_revoked`` events (those that gave up partitions) and partitions revoked."""
    signs: Counter[str] = Counter()
    episodes = revocations = revoked = 0
    for path in logs:
        last_lost: float | None = None
        for event, line in _events(path):
            for name, matches in WORKER_SIGNS.items():
                if matches(event, line):
                    signs[name] += 1
            if WORKER_SIGNS["unknown_member_id"](event, line) or WORKER_SIGNS[
                    "illegal_generation"](event, line):
                at = _at(event) or 0.0
                if last_lost is None or at - last_lost > EPISODE_S:
                    episodes += 1
                last_lost = at
            if event.get("event") == "partitions_revoked" and event.get("partitions"):
                revocations += 1
                revoked += len(event["partitions"])
    return {"signs": {name: signs[name] for name in WORKER_SIGNS},
            "membership_lost_episodes": episodes,
            "revocations": revocations, "partitions_revoked": revoked}


class BrokerLog:
    """The broker's ``server.log`` from the moment this was made: its group coordinator's
    lines about one group (kafka-local's broker; absent elsewhere, then every figure is None)."""

    REMOVED_UNJOINED = re.compile(r"removed dynamic members who haven't joined: \[?([^\]]*)")
    REMOVED_UNSYNCED = re.compile(r"removed members who haven't sent their sync requests: "
                                  r"\[?([^\]]*)")

    def __init__(self, path: Path | None) -> None:
        self.path = path if path is not None and path.is_file() else None
        self._start = self.path.stat().st_size if self.path is not None else 0

    def lines(self, group: str) -> list[str] | None:
        """The lines naming ``group`` written since; None without a log."""
        if self.path is None:
            return None
        with self.path.open("rb") as log:
            size = self.path.stat().st_size
            log.seek(self._start if size >= self._start else 0)  # rolled over: all of it
            text = log.read().decode(errors="replace")
        return [line for line in text.splitlines() if group in line]

    def figures(self, group: str) -> dict[str, Any]:
        """Rebalances started, members removed by the coordinator (session expired, not
        rejoined within the rebalance timeout, no sync), and members that left by
        ``LeaveGroup``."""
        lines = self.lines(group)
        if lines is None:
            return {"broker_log": None}
        unjoined = sum(_members(self.REMOVED_UNJOINED, line) for line in lines)
        unsynced = sum(_members(self.REMOVED_UNSYNCED, line) for line in lines)
        failed = sum("has failed, removing it from the group" in line for line in lines)
        return {
            "broker_log": str(self.path),
            "rebalances": sum("Preparing to rebalance group" in line for line in lines),
            "expelled_session_expired": failed,
            "expelled_not_rejoined": unjoined,
            "expelled_not_synced": unsynced,
            "expelled": failed + unjoined + unsynced,
            "left_by_leave_group": sum("has left group through explicit" in line
                                       for line in lines),
        }


def _members(pattern: re.Pattern[str], line: str) -> int:
    match = pattern.search(line)
    if match is None:
        return 0
    return len([m for m in re.split(r"[,\s]+", match.group(1)) if m.strip("[]")])


def default_broker_log(bootstrap: str) -> Path | None:
    """kafka-local's log for the broker's port: under ``KAFKA_LOCAL_HOME``, or this checkout's
    ``.kafka``; None when neither has one."""
    port = bootstrap.rsplit(":", 1)[-1]
    homes = [Path(home) for home in (os.environ.get("KAFKA_LOCAL_HOME"),) if home]
    for home in [*homes, ROOT / ".kafka"]:
        path = home / f"data-{port}" / "logs" / "server.log"
        if path.is_file():
            return path
    return None


# -- the workers --------------------------------------------------------------------------------


@dataclass
class Group:
    """One scenario's topics, group, judge and workers."""

    bench: Bench
    traces: str
    verdicts: str
    dlq: str
    name: str
    spec: RunSpec | None = None
    children: list[Child] = field(default_factory=list)

    def start(self) -> Child:
        """Start one more worker."""
        assert self.spec is not None
        child = start_system(self.bench, self.spec)
        self.children.append(child)
        return child

    def running(self) -> list[Child]:
        """The workers still running."""
        return [child for child in self.children if child.alive()]

    async def close(self) -> list[int]:
        """SIGTERM every worker still running; their exit codes."""
        return list(await asyncio.gather(*(child.stop(grace_s=60) for child in self.running())))


async def _group(bench: Bench, what: str, traces: int, partitions: int, judge_url: str,
                 concurrency: int, env: dict[str, str]) -> Group:
    topic = await bench.topic(f"redo-{what}", partitions)
    group = Group(bench, topic, await bench.topic(f"redo-{what}-verdicts"),
                  await bench.topic(f"redo-{what}-dlq"), bench.name(f"group-{what}"))
    await fill(bench.bootstrap, Backlog(topic, traces, partitions))
    # This checkout's code in the workers, whatever the venv's editable install points at.
    inherited = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    path = os.pathsep.join([str(ROOT), *(p for p in inherited if p and p != str(ROOT))])
    group.spec = RunSpec(WORKER, topic, group.verdicts, group.dlq, group.name, judge_url,
                         concurrency=concurrency, log_level="info",
                         env={"DELIVERY": "at_least_once", "PYTHONPATH": path, **env})
    return group


def assigned(child: Child) -> bool:
    """The worker has been handed at least one partition."""
    return any(event.get("event") == "partitions_assigned" and event.get("partitions")
               for event, _ in _events(child.log_path))


async def _until(condition: Callable[[], bool], deadline: float, group: Group) -> bool:
    """Wait for ``condition``; False once ``deadline`` (monotonic) passes: a run that cannot
    finish (a rebalance storm) still reports what it measured. A worker that exits on its own
    is an error."""
    while not condition():
        dead = [c for c in group.children if not c.alive() and c.process.returncode not in
                (0, -9)]
        if dead:
            raise RuntimeError(f"{dead[0].name} exited ({dead[0].process.returncode}):\n"
                               f"{dead[0].log_tail()}")
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


async def _kill(child: Child) -> int:
    child.process.kill()
    return await asyncio.to_thread(child.process.wait)


async def _committed(bench: Bench, group: Group, total: int, timeout_s: float) -> int:
    async with GroupWatch(bench.bootstrap, group.name, group.traces) as watch:
        deadline = time.monotonic() + timeout_s
        while True:
            count = await watch.committed()
            if count >= total or time.monotonic() >= deadline:
                return count
            await asyncio.sleep(0.5)


# -- the scenarios ------------------------------------------------------------------------------


async def kills(bench: Bench, sizes: KillSizes, broker_log: Path | None,
                say: Callable[[str], None] = print) -> dict[str, Any]:
    """Two workers, one of them SIGKILLed ``sizes.kills`` times; see the module docstring."""
    judge = RedoJudge(sizes.latency_s, sizes.fail_every, sizes.retry_after_s)
    with JudgeServer(judge, models=(MODEL,)) as server:
        group = await _group(bench, "kills", sizes.traces, sizes.partitions, server.url,
                             sizes.concurrency, {})
        broker = BrokerLog(broker_log)
        rng = random.Random(3)  # kill moments, reproducible
        events: list[list[Any]] = []
        try:
            async with VerdictReader(bench.bootstrap, group.verdicts) as out:
                started = time.monotonic()
                deadline = started + sizes.finish_timeout_s
                victim, _ = group.start(), group.start()
                done = True
                for kill in range(sizes.kills):
                    # Spread over the run: the k-th kill once k/(kills+1) of the traces are
                    # judged, and only once the victim holds partitions (it is working).
                    mark = sizes.traces * (kill + 1) // (sizes.kills + 1)

                    def due(victim: Child = victim, mark: int = mark) -> bool:
                        return out.judged >= mark and assigned(victim)

                    done = await _until(due, deadline, group)
                    await asyncio.sleep(rng.uniform(0.0, 1.0))
                    if not done or out.judged >= sizes.traces:
                        break  # out of time, or nothing left to interrupt
                    await _kill(victim)
                    events.append([round(time.monotonic() - started, 1), "sigkill",
                                   out.judged])
                    say(f"  kill {kill + 1} at {events[-1][0]} s, {out.judged} traces judged")
                    victim = group.start()
                done = done and await _until(lambda: out.judged >= sizes.traces, deadline,
                                             group)
                if not done:
                    say(f"  out of time ({sizes.finish_timeout_s:g} s), {out.judged} judged")
                finished_s = (round(max(out.first_at.values()) - started, 1) if done
                              else None)
                committed = await _committed(bench, group, sizes.traces, 60 if done else 1)
                await asyncio.sleep(1.0)  # stray duplicates still on their way arrive
                figures = verdict_figures(out, sizes.traces)
                gaps = longest_gaps(out.first_at.values(), started)
            codes = await group.close()
        finally:
            for child in group.running():
                await _kill(child)
    calls = judge.counts()
    return {
        "scenario": "kills",
        "config": _config(sizes),
        "figures": {
            "kills": sum(1 for e in events if e[1] == "sigkill"),
            "paid_calls_per_judged_trace": round(calls["ok"] / max(figures["traces_judged"],
                                                                    1), 4),
            "judge_calls_ok": calls["ok"],
            "judge_calls_rate_limited": calls["rate_limited"],
            "judge_probes": calls["probes"],
            "redone_judge_calls": calls["ok"] - figures["traces_judged"],
            **figures,
            "seconds_until_all_judged": finished_s,  # None: not within finish_timeout_s
            "longest_gaps_s": gaps,
            "committed_all": committed >= sizes.traces,
            "exit_codes_at_end": codes,
            **worker_log_figures(c.log_path for c in group.children),
            **broker.figures(group.name),
        },
        "events": events,
        "logs": [str(c.log_path) for c in group.children],
    }


async def rebalance(bench: Bench, sizes: RebalanceSizes, broker_log: Path | None,
                    say: Callable[[str], None] = print) -> dict[str, Any]:
    """``replicas`` workers, one more joins, then it leaves by SIGTERM; see the docstring."""
    judge = RedoJudge(sizes.latency_s)
    with JudgeServer(judge, models=(MODEL,)) as server:
        group = await _group(bench, "rebalance", sizes.traces, sizes.partitions, server.url,
                             sizes.concurrency, {})
        broker = BrokerLog(broker_log)
        events: list[list[Any]] = []
        try:
            async with VerdictReader(bench.bootstrap, group.verdicts) as out:
                started = time.monotonic()
                deadline = started + sizes.finish_timeout_s

                def note(what: str) -> None:
                    events.append([round(time.monotonic() - started, 1), what, out.judged])
                    say(f"  {what} at {events[-1][0]} s, {out.judged} traces judged")

                first = [group.start() for _ in range(sizes.replicas)]
                codes: list[int] = []
                done = await _until(lambda: out.judged >= sizes.traces // 3
                                    and all(assigned(c) for c in first), deadline, group)
                if done:
                    extra = group.start()
                    note(f"scale {sizes.replicas} -> {sizes.replicas + 1}")
                    done = await _until(lambda: out.judged >= 2 * sizes.traces // 3
                                        and assigned(extra), deadline, group)
                if done:
                    note(f"scale {sizes.replicas + 1} -> {sizes.replicas} (SIGTERM)")
                    codes.append(await extra.stop(grace_s=60))
                    note(f"the leaver exited ({codes[-1]})")
                done = done and await _until(lambda: out.judged >= sizes.traces, deadline,
                                             group)
                if not done:
                    note(f"out of time ({sizes.finish_timeout_s:g} s)")
                finished_s = (round(max(out.first_at.values()) - started, 1) if done
                              else None)
                committed = await _committed(bench, group, sizes.traces, 60 if done else 1)
                await asyncio.sleep(1.0)
                figures = verdict_figures(out, sizes.traces)
                gaps = longest_gaps(out.first_at.values(), started)
            codes += await group.close()
        finally:
            for child in group.running():
                await _kill(child)
    calls = judge.counts()
    return {
        "scenario": "rebalance",
        "config": _config(sizes),
        "figures": {
            **worker_log_figures(c.log_path for c in group.children),
            **broker.figures(group.name),
            **figures,
            "seconds_until_all_judged": finished_s,  # None: not within finish_timeout_s
            "longest_gaps_s": gaps,
            "paid_calls_per_judged_trace": round(calls["ok"] / max(figures["traces_judged"],
                                                                    1), 4),
            "judge_calls_ok": calls["ok"],
            "committed_all": committed >= sizes.traces,
            "exit_codes_at_end": codes,
        },
        "events": events,
        "logs": [str(c.log_path) for c in group.children],
    }


def _config(sizes: KillSizes | RebalanceSizes) -> dict[str, Any]:
    return {name: list(value) if isinstance(value, tuple) else value
            for name, value in asdict(sizes).items()}


# -- output -------------------------------------------------------------------------------------


def table(result: dict[str, Any]) -> str:
    """The figures as a two-column markdown table (nested counts flattened)."""
    rows = [f"| {result['scenario']} | |", "|---|---:|"]
    for name, value in result["figures"].items():
        if isinstance(value, dict):
            rows += [f"| {name}.{key} | {inner} |" for key, inner in value.items()]
        else:
            rows.append(f"| {name} | {value} |")
    return "\n".join(rows)


async def run_redo(bench: Bench, sizes: RedoSizes, chosen: set[str],
                   say: Callable[[str], None], broker_log: Path | None = None,
                   ) -> dict[str, Any]:
    """The chosen redo scenarios (``make bench``'s), their results by scenario name."""
    broker_log = broker_log or default_broker_log(bench.bootstrap)
    results: dict[str, Any] = {}
    if "redo_kills" in chosen:
        k = sizes.kills
        say(f"redo under kills: {k.traces} traces, {k.partitions} partitions, 2 workers x "
            f"{k.concurrency} slots, {k.kills} SIGKILLs, judge {k.latency_s[0]:g}-"
            f"{k.latency_s[1]:g} s with a 429 every {k.fail_every}th call:")
        results["redo_kills"] = await kills(bench, k, broker_log, say)
        say(table(results["redo_kills"]))
    if "redo_rebalance" in chosen:
        r = sizes.rebalance
        say(f"redo under rebalances: {r.traces} traces, {r.partitions} partitions, "
            f"{r.replicas} -> {r.replicas + 1} -> {r.replicas} workers x {r.concurrency} "
            f"slots, judge {r.latency_s[0]:g}-{r.latency_s[1]:g} s:")
        results["redo_rebalance"] = await rebalance(bench, r, broker_log, say)
        say(table(results["redo_rebalance"]))
    return results


def main(argv: list[str] | None = None) -> int:
    """Run one scenario; print its table and its JSON."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.redo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", choices=("kills", "rebalance"))
    parser.add_argument("--traces", type=int)
    parser.add_argument("--partitions", type=int)
    parser.add_argument("--concurrency", type=int, help="JUDGE_MAX_CONCURRENCY per worker")
    parser.add_argument("--latency", type=float, nargs=2, metavar=("LOW", "HIGH"),
                        help="judge latency, uniform in [LOW, HIGH] s")
    parser.add_argument("--kills", type=int, help="kills: how many SIGKILLs")
    parser.add_argument("--replicas", type=int, help="rebalance: workers before the join")
    parser.add_argument("--timeout", type=float,
                        help="seconds from the first worker's start until the run gives up")
    parser.add_argument("--broker-log", type=Path,
                        help="the broker's server.log (default: kafka-local's, if found)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    overrides: dict[str, Any] = {name: value for name, value in (
        ("traces", args.traces), ("partitions", args.partitions),
        ("concurrency", args.concurrency),
        ("latency_s", tuple(args.latency) if args.latency else None),
        ("kills", args.kills if args.scenario == "kills" else None),
        ("replicas", args.replicas if args.scenario == "rebalance" else None),
        ("finish_timeout_s", args.timeout),
    ) if value is not None}
    sizes = (RedoSizes(kills=replace(KillSizes(), **overrides)) if args.scenario == "kills"
             else RedoSizes(rebalance=replace(RebalanceSizes(), **overrides)))
    result = asyncio.run(_main(f"redo_{args.scenario}", sizes, args.broker_log))
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


async def _main(scenario: str, sizes: RedoSizes, broker_log: Path | None) -> dict[str, Any]:
    log_dir = Path(tempfile.mkdtemp(prefix="groundedness-redo-"))
    bench = Bench(kafka_bootstrap()[0], time.strftime("%m%d%H%M%S") + uuid.uuid4().hex[:4],
                  log_dir)
    print(f"redo {bench.tag}: broker {bench.bootstrap}, logs in {log_dir}", flush=True)
    started = time.monotonic()
    try:
        results = await run_redo(bench, sizes, {scenario}, lambda m: print(m, flush=True),
                                 broker_log)
    finally:
        await bench.cleanup()
    result = dict(results[scenario])
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


if __name__ == "__main__":
    sys.exit(main())
