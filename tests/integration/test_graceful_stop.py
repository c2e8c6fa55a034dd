"""SIGTERM drains: fetching stops, in-flight work finishes within the grace period, the
watermarks are committed and the worker exits 0, so a restart re-publishes nothing."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from consumer.localjudge.server import JudgeServer
from tests.support.fake_judge import PROBE, ScriptedJudge
from tests.support.streams import Topics, create_topics, group_offsets, produce
from tests.support.workers import (
    GROUNDEDNESS,
    REPO_ROOT,
    WORKER_VARIABLES,
    VerdictCollector,
    WorkerPool,
    scored_stream,
    tally,
    tracebacks,
    wait_committed,
    worker_env,
)

pytestmark = pytest.mark.integration

TRACES = 240
PARTITIONS = 3
CONCURRENCY = 8
JUDGE_LATENCY_S = 1.0
DRAIN_TIMEOUT_S = 20.0


async def test_sigterm_finishes_in_flight_work_and_a_restart_repeats_nothing(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path
) -> None:
    judge, server = fake_judge
    judge.latency_s = JUDGE_LATENCY_S
    topics = Topics.fresh("graceful")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    values, scores, _ = scored_stream(TRACES)
    await produce(kafka, topics.traces, values)
    env = worker_env(
        topics.env(kafka), server.url,
        JUDGE_MAX_CONCURRENCY=str(CONCURRENCY), DRAIN_TIMEOUT_SECONDS=str(DRAIN_TIMEOUT_S),
    )

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        first = await pool.start(env)
        # Mid-stream: every judge slot busy (a second per call) and more records waiting.
        assert await out.wait_for_count(2 * CONCURRENCY, timeout_s=60), first.log()
        at_signal = len(out.verdicts)
        judging = _judged(judge) - at_signal
        signalled = time.monotonic()
        code = await first.terminate(timeout_s=DRAIN_TIMEOUT_S + 20)
        stop_s = time.monotonic() - signalled
        await asyncio.sleep(1.0)  # the last verdicts reach the collector
        published = len(out.verdicts)
        committed, _ = await group_offsets(kafka, topics.group, topics.traces)

        judge.latency_s = 0.0
        second = await pool.start(env, name="after-restart")
        assert await out.wait_for(set(scores), timeout_s=90), second.log()
        final, ends = await wait_committed(kafka, topics.group, topics.traces, 30)
        await asyncio.sleep(1.0)
        assert await second.terminate() == 0

    result = tally(out.verdicts, scores)
    repeated = [a for a, n in Counter(c.answer for c in judge.calls if c.answer != PROBE).items()
                if n > 1]
    print(
        f"\ngraceful stop: SIGTERM after {at_signal} verdicts, {judging} judge calls running "
        f"(latency {JUDGE_LATENCY_S:.0f} s, concurrency {CONCURRENCY}): {published - at_signal} "
        f"more verdicts while draining, exit {code} after {stop_s:.1f} s, committed "
        f"{sum(committed.values())} of {TRACES}; after the restart {result.duplicates} "
        f"duplicates, {len(repeated)} traces judged twice"
    )
    assert code == 0
    assert stop_s < DRAIN_TIMEOUT_S + 10
    assert "drain_timed_out" not in first.log(), "in-flight work was abandoned"
    assert not tracebacks(first.log())
    assert 0 < sum(committed.values()) < TRACES, "the stop came mid-stream and committed"
    # The drain finished what was fetched and committed it: the first worker's verdicts are
    # exactly those of the non-empty records below its commit, so the restart starts after.
    below = {v["trace_id"] for v in out.verdicts[:published]
             if v["source"]["offset"] < committed[v["source"]["partition"]]}
    assert len(below) == published
    assert len(below) == sum(1 for v in out.verdicts if v["trace_id"] in scores
                             and v["source"]["offset"] < committed[v["source"]["partition"]])
    assert not result.missing
    assert not result.wrong
    assert result.duplicates == 0, "the restart re-published a verdict"
    assert not repeated, "the restart judged a trace again"
    assert final == ends


def _judged(judge: ScriptedJudge) -> int:
    return sum(1 for call in judge.calls if call.answer != PROBE)


@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_stops_the_worker_when_its_output_is_a_pipe_nobody_reads(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], signal_number: int,
) -> None:
    """``groundedness run 2>&1 | head -3``: head exits after three lines, and every later log
    line meets a closed pipe; the signal's drain must still run and exit."""
    _, server = fake_judge
    topics = Topics.fresh("closed-pipe")
    await create_topics(kafka, topics, partitions=1)
    env = worker_env(topics.env(kafka), server.url, LOG_LEVEL="info",
                     DRAIN_TIMEOUT_SECONDS="5")
    full_env = {k: v for k, v in os.environ.items() if k.upper() not in WORKER_VARIABLES}
    process = await asyncio.create_subprocess_exec(
        str(GROUNDEDNESS), "run", env=full_env | env, cwd=str(REPO_ROOT),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT)
    try:
        assert process.stdout is not None
        for _ in range(3):  # head -3
            await asyncio.wait_for(process.stdout.readline(), 30)
        process.stdout.feed_eof()
        transport = process._transport  # type: ignore[attr-defined]
        transport.get_pipe_transport(1).close()  # the reader is gone: writes fail (EPIPE)
        await asyncio.sleep(2.0)  # the worker runs on, logging into the closed pipe
        assert process.returncode is None
        process.send_signal(signal_number)
        code = await asyncio.wait_for(process.wait(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert code in (0, 130), code
