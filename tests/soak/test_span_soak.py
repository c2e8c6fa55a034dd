"""Soak: minutes of steady, overlapping span traffic through two workers while they are
stopped, killed and left without a judge (``make soak``; not part of ``make test``).

Each RAG request's spans come in two records (the retriever's, then the LLM, chain and
root) keyed by trace id, several requests in flight at once (``tests/support/soak_traffic``).
Two workers share the group, at least once. The faults, one at a time, each settled before
the next: a SIGTERM restart, a SIGKILL restart, and a judge outage longer than
``TRACE_MAX_WAIT_SECONDS``. What must hold at the end:

- every trace has a verdict, and every verdict record is of the whole trace (all its GenAI
  spans, the root seen, context from the retriever) and not an error;
- a graceful stop redoes nothing: no trace is judged again between the SIGTERM and the next
  fault (a repeated verdict record there is the SIGTERM's doing: a fault cannot redo work
  before it happens); the ``sigterm`` run has only that fault, so no duplicate at all;
- nor does the outage: no repeated verdict record after it began;
- a SIGKILL redoes only what was in flight: at most ``2 x JUDGE_MAX_CONCURRENCY`` traces
  with more than one verdict record per kill (the judge calls in flight, and those finished
  in the last commit interval).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from consumer.localjudge.server import JudgeServer
from tests.support.fake_judge import ScriptedJudge
from tests.support.soak_traffic import SpanTraffic, verdict_problems
from tests.support.streams import Topics, create_topics
from tests.support.workers import (
    REPO_ROOT,
    VerdictCollector,
    Worker,
    WorkerPool,
    tracebacks,
    wait_committed,
    worker_env,
)

pytestmark = [pytest.mark.soak, pytest.mark.integration]

PARTITIONS = 6
JUDGE_MAX_CONCURRENCY = 8
QUIET_S = 1.0
MAX_WAIT_S = 5.0
OUTAGE_S = 10.0  # longer than MAX_WAIT_S: traces open when it starts outlive their wait
JUDGE_LATENCY_S = 0.2
RATE = 8.0  # requests a second
SETTLE_S = 20.0  # the verdicts stop coming: whatever is missing then stays missing


@dataclass(frozen=True)
class Plan:
    """When each fault comes (seconds after the traffic starts; None: not in this run)."""

    name: str
    traffic_s: float
    sigterm_at: float | None = None
    sigkill_at: float | None = None
    outage_at: float | None = None

    @property
    def kills(self) -> int:
        """SIGKILLs in the run."""
        return 0 if self.sigkill_at is None else 1


FULL = Plan("faults", traffic_s=190.0, sigterm_at=35.0, sigkill_at=85.0, outage_at=135.0)
SIGTERM_ONLY = Plan("sigterm", traffic_s=65.0, sigterm_at=30.0)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("plan", [FULL, SIGTERM_ONLY], ids=lambda plan: plan.name)
async def test_steady_span_traffic_through_restarts_kills_and_a_judge_outage(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path, plan: Plan
) -> None:
    judge, server = fake_judge
    judge.latency_s = JUDGE_LATENCY_S
    topics = Topics.fresh(f"soak-{plan.name}")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    env = worker_env(
        topics.env(kafka), server.url, TRACES_FORMAT="otlp_proto", DELIVERY="at_least_once",
        JUDGE_MAX_CONCURRENCY=str(JUDGE_MAX_CONCURRENCY), TRACE_QUIET_SECONDS=f"{QUIET_S:g}",
        TRACE_MAX_WAIT_SECONDS=f"{MAX_WAIT_S:g}", LOG_LEVEL="info",
        # This checkout's code in the workers, even where the venv's editable install points
        # at another checkout (a worktree).
        PYTHONPATH=str(REPO_ROOT),
    )
    faults: dict[str, float] = {}  # fault -> time.monotonic() it began
    codes: list[int] = []

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out, \
            SpanTraffic(kafka, topics.traces, rate=RATE) as traffic:
        workers = [await pool.start(env), await pool.start(env)]
        started = time.monotonic()
        schedule = sorted((at, what) for what, at in (
            ("sigterm", plan.sigterm_at), ("sigkill", plan.sigkill_at),
            ("outage", plan.outage_at)) if at is not None)
        for at, what in schedule:
            await asyncio.sleep(max(0.0, started + at - time.monotonic()))
            faults[what] = time.monotonic()
            if what == "sigterm":
                codes.append(await workers[0].terminate())
                workers[0] = await pool.start(env, name="after-sigterm")
            elif what == "sigkill":
                await workers[1].kill()
                workers[1] = await pool.start(env, name="after-sigkill")
            else:
                judge.outage = 503
                await asyncio.sleep(OUTAGE_S)
                judge.outage = None
        await asyncio.sleep(max(0.0, started + plan.traffic_s - time.monotonic()))
        await traffic.stop()
        sent_s = time.monotonic() - started
        await _settled(out, set(traffic.requests), SETTLE_S)
        finished_s = time.monotonic() - started
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 30)
        await asyncio.sleep(1.0)
        codes += [await worker.terminate() for worker in workers]

    allowed = plan.kills * 2 * JUDGE_MAX_CONCURRENCY
    problems = verdict_problems(out.verdicts, traffic, allowed, since=started)
    windows = _windows(faults)
    redone = {what: _redone_in(out, begin, end) for what, (begin, end) in windows.items()}
    if redone.get("sigterm"):
        sigterm_at = faults["sigterm"]
        before = {t for t in redone["sigterm"] if _first_at(out, t) < sigterm_at}
        problems.append(f"{len(redone['sigterm'])} traces judged again after the SIGTERM "
                        f"(before the next fault), {len(before)} of them judged before it was "
                        f"sent (e.g. {sorted(redone['sigterm'])[:3]})")
    if redone.get("outage"):
        problems.append(f"{len(redone['outage'])} traces judged again after the outage began")
    if committed != ends:
        problems.append(f"not every record committed: {committed} of {ends}")
    if codes != [0] * len(codes):
        problems.append(f"exit codes after SIGTERM: {codes}")
    problems += [f"{w.name}: traceback" for w in pool.workers if tracebacks(w.log())]
    print(_summary(plan, traffic, out, sent_s, finished_s, pool.workers, redone, problems))
    assert traffic.most_in_flight >= 2, "the traffic never had two requests in flight"
    assert not problems, "\n".join(problems)


async def _settled(out: VerdictCollector, trace_ids: set[str], quiet_s: float) -> None:
    """Wait until every trace has a verdict, or none has come for ``quiet_s``."""
    while not trace_ids <= out.trace_ids():
        last = out.arrived_at[-1] if out.arrived_at else 0.0
        if time.monotonic() - last > quiet_s:
            return
        await asyncio.sleep(0.5)


def _windows(faults: dict[str, float]) -> dict[str, tuple[float, float]]:
    """Each fault's stretch of the run: from its start to the next fault's (or the end)."""
    order = sorted(faults.items(), key=lambda item: item[1])
    ends = [at for _, at in order[1:]] + [float("inf")]
    return {what: (at, end) for (what, at), end in zip(order, ends, strict=True)}


def _redone_in(out: VerdictCollector, begin: float, end: float) -> set[str]:
    """Traces with a repeated verdict record (not their first) arriving in [begin, end): the
    fault of that stretch redid them (a fault cannot redo work before it happens)."""
    seen: set[str] = set()
    redone = set()
    for verdict, at in zip(out.verdicts, out.arrived_at, strict=True):
        trace_id = verdict["trace_id"]
        if trace_id in seen and begin <= at < end:
            redone.add(trace_id)
        seen.add(trace_id)
    return redone


def _first_at(out: VerdictCollector, trace_id: str) -> float:
    return min(at for verdict, at in zip(out.verdicts, out.arrived_at, strict=True)
               if verdict["trace_id"] == trace_id)


def _summary(plan: Plan, traffic: SpanTraffic, out: VerdictCollector, sent_s: float,
             finished_s: float, workers: list[Worker], redone: dict[str, set[str]],
             problems: list[str]) -> str:
    partitions_revoked = sum(1 for w in workers for e in w.events()
                             if e.get("event") == "partitions_revoked" and e.get("partitions"))
    repeated = sum(1 for n in Counter(v["trace_id"] for v in out.verdicts).values() if n > 1)
    by_fault = ", ".join(f"{len(ids)} after the {what}" for what, ids in redone.items())
    return (
        f"\nsoak ({plan.name}): {len(traffic.requests)} traces ({RATE:g}/s for {sent_s:.0f} s, "
        f"up to {traffic.most_in_flight} requests in flight) over {PARTITIONS} partitions, 2 "
        f"workers x {JUDGE_MAX_CONCURRENCY} slots; faults: "
        f"{', '.join(f'{k} at {v:g} s' for k, v in _faults(plan).items()) or 'none'}; "
        f"{len(out.verdicts)} verdict records for {len(out.trace_ids())} traces "
        f"({repeated} with more than one: {by_fault or 'no fault'}), {partitions_revoked} "
        f"revocations, settled at {finished_s:.0f} s"
        + "".join(f"\n  PROBLEM: {problem}" for problem in problems)
    )


def _faults(plan: Plan) -> dict[str, float]:
    return {what: at for what, at in (("sigterm", plan.sigterm_at), ("sigkill", plan.sigkill_at),
                                      ("outage", plan.outage_at)) if at is not None}
