"""``BatchRunner`` against the fake judge's Batch API over real HTTP, through the real SDK: what
a batch replay meets (answers, errors, limits, expiry, failure, cancelling) and what a stop or
a crash at any point leaves for the next run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from consumer.judge.attempts import Retries
from consumer.judge.client import OpenAIJudge
from consumer.judge.ratelimit import JudgeLimiter
from consumer.judge.result import Answered, JudgeResult, TraceFailed
from consumer.localjudge.batches import BatchFate
from consumer.replay.batch.outcomes import Unanswered
from consumer.replay.batch.plan import FileLimits
from consumer.replay.batch.progress import Progress
from consumer.replay.batch.requests import BatchLine
from consumer.replay.batch.runner import BatchRunner, FinishedBatch, Polling
from consumer.replay.batch.state import BatchState, BatchStateError, Scope
from tests.unit.replay.batch.conftest import MODEL, BatchApi, ManualClock, judge_line, judge_request

SCOPE = Scope("llm-traces", "2026-05-01T00:00:00+00:00", "2026-05-02T00:00:00+00:00", MODEL)
FAST = Polling(first_s=0.001, max_s=0.01)


class Crash(Exception):
    """A process that dies while writing its state."""


class CrashingState(BatchState):
    """A state whose ``crash_at``-th write never happens: the process dies first."""

    crash_at = 0
    writes = 0

    def _write(self, text: str) -> None:
        self.writes += 1
        if self.writes == self.crash_at:
            raise Crash(f"crashed at write {self.writes}")
        super()._write(text)


def runner(api: BatchApi, state: BatchState, **options: object) -> BatchRunner:
    return BatchRunner(api.client, state, polling=FAST, **options)  # type: ignore[arg-type]


async def publish_all(
    batch_runner: BatchRunner,
    state: BatchState,
    lines: list[BatchLine],
    into: list[FinishedBatch] | None = None,
) -> list[FinishedBatch]:
    """Run to the end as a replay would: each finished batch's verdicts published at once
    (kept in ``into`` too, so a run that crashes still tells what it yielded)."""
    finished = [] if into is None else into
    async for batch in batch_runner.run(lines):
        finished.append(batch)
        state.mark_published([*batch.results, *batch.unanswered])
    return finished


def scored(count: int) -> list[BatchLine]:
    """``count`` answers, answer i scored (i % 5) + 1 by the fake judge."""
    return [judge_line(f"t{i}", f"Answer {i}. [[score={i % 5 + 1}]]") for i in range(count)]


def scores(finished: list[FinishedBatch]) -> dict[str, int]:
    """Every answered request's score, checking that none comes twice."""
    found: dict[str, int] = {}
    for batch in finished:
        for cid, result in batch.results.items():
            assert cid not in found, f"{cid} came twice"
            assert isinstance(result, Answered)
            found[cid] = result.answer.score
    return found


def comparable(result: JudgeResult) -> tuple[object, ...]:
    """What a verdict is made of (latency and attempts aside)."""
    if isinstance(result, Answered):
        return ("answered", result.answer, result.usage)
    return ("failed", result.kind, result.message, result.usage)


async def test_a_batch_gives_the_results_the_synchronous_judge_gives(
    batch_api: BatchApi, tmp_path: Path
) -> None:
    answers = {"good": "The sky is blue.", "weak": "[[score=2]] The sky is green.",
               "long": "[[context_length]]", "refused": "[[refuse]]"}
    lines = [judge_line(cid, answer) for cid, answer in answers.items()]
    state = BatchState.open(tmp_path / "state.json", SCOPE)
    progress: list[Progress] = []
    finished = await publish_all(runner(batch_api, state, on_progress=progress.append),
                                 state, lines)

    [batch] = finished
    assert (batch.status, batch.unanswered, batch.resubmitted) == ("completed", {}, ())
    judge = OpenAIJudge(batch_api.client, MODEL, timeout_s=5.0,
                        max_concurrency=4, limiter=JudgeLimiter(None, None),
                        retries=Retries(backoff_s=0.001))
    synchronous = {cid: await judge.judge(judge_request(answer))
                   for cid, answer in answers.items()}
    await judge.breaker.close()
    assert {cid: comparable(r) for cid, r in batch.results.items()} == {
        cid: comparable(r) for cid, r in synchronous.items()}
    assert isinstance(batch.results["long"], TraceFailed)
    assert batch.results["long"].kind == "context_too_long"
    assert progress[-1].done + progress[-1].failed == progress[-1].total == 4
    assert progress[-1].running == 0
    saved = json.loads(state.path.read_text())
    assert [b["status"] for b in saved["batches"]] == ["completed"]
    assert saved["published"] == sorted(answers)


async def test_what_the_synchronous_judge_would_retry_comes_back_unanswered(
    batch_api: BatchApi, tmp_path: Path
) -> None:
    answers = {"5xx": "[[status=500]]", "429": "[[status=429]]", "hang": "[[hang]]",
               "garbage": "[[garbage]]", "flaky": "[[fail=1 status=503]] Fine."}
    lines = [judge_line(cid, answer) for cid, answer in answers.items()]
    state = BatchState.open(tmp_path / "state.json", SCOPE)
    [batch] = await publish_all(runner(batch_api, state), state, lines)
    assert batch.results == {}
    kinds = {cid: item.kind for cid, item in batch.unanswered.items()}
    assert kinds == {"5xx": "judge_http_500", "429": "judge_rate_limited",
                     "hang": "judge_timeout", "garbage": "unparseable_answer",
                     "flaky": "judge_http_503"}
    server_error = batch.unanswered["5xx"]
    assert server_error.message.startswith("Error code: 500 - The server had an error")
    failure = server_error.as_failure()
    assert (failure.kind, failure.message) == (server_error.kind, server_error.message)
    assert batch.unanswered["garbage"].usage is not None  # the batch spent tokens on it


async def test_a_poll_that_fails_for_a_moment_is_tried_again(
    batch_api: BatchApi, tmp_path: Path
) -> None:
    batch_api.batches.failing_retrievals = 2
    state = BatchState.open(tmp_path / "state.json", SCOPE)
    with capture_logs() as logs:
        finished = await publish_all(runner(batch_api, state), state, scored(2))
    assert scores(finished) == {"t0": 1, "t1": 2}
    failed_polls = [e for e in logs if e["event"] == "batch_poll_failed"]
    assert [e["error"] for e in failed_polls] == ["judge_http_500", "judge_http_500"]


async def test_requests_are_split_by_the_request_and_byte_limits(
    batch_api: BatchApi, tmp_path: Path
) -> None:
    lines = scored(7)
    # The fake endpoint refuses what is over the same limits: a wrong plan would fail.
    batch_api.batches.max_requests_per_file = 3
    by_count = BatchState.open(tmp_path / "count.json", SCOPE)
    finished = await publish_all(
        runner(batch_api, by_count, limits=FileLimits(max_requests=3)), by_count, lines)
    assert [len(r.custom_ids) for r in by_count.records] == [3, 3, 1]
    assert scores(finished) == {f"t{i}": i % 5 + 1 for i in range(7)}

    largest = max(len(line.data) for line in lines)
    batch_api.batches.max_requests_per_file = 50_000
    batch_api.batches.max_file_bytes = 2 * largest + 1
    by_bytes = BatchState.open(tmp_path / "bytes.json", SCOPE)
    finished = await publish_all(
        runner(batch_api, by_bytes, limits=FileLimits(max_bytes=2 * largest + 1)),
        by_bytes, lines)
    assert [len(r.custom_ids) for r in by_bytes.records] == [2, 2, 2, 1]
    assert scores(finished) == {f"t{i}": i % 5 + 1 for i in range(7)}
    assert len(batch_api.batches.created) == 3 + 4


async def test_an_expired_batch_is_reported_and_its_unanswered_requests_resubmitted(
    batch_api: BatchApi, tmp_path: Path
) -> None:
    batch_api.batches.fates.append(BatchFate(expire_after=2))
    state = BatchState.open(tmp_path / "state.json", SCOPE)
    with capture_logs() as logs:
        finished = await publish_all(runner(batch_api, state), state, scored(5))
    expired, resubmitted = finished
    assert (expired.status, sorted(expired.results)) == ("expired", ["t0", "t1"])
    assert (expired.unanswered, expired.resubmitted) == ({}, ("t2", "t3", "t4"))
    assert (resubmitted.status, sorted(resubmitted.results)) == ("completed", ["t2", "t3", "t4"])
    assert scores(finished) == {f"t{i}": i % 5 + 1 for i in range(5)}
    [report] = [e for e in logs if e["event"] == "batch_expired"]
    assert (report["batch_id"], report["answered"], report["resubmitted"]) == (
        expired.batch_id, 2, 3)
    assert [(r.attempt, r.resubmitted) for r in state.records] == [(1, True), (2, False)]
    assert len(batch_api.judge.calls) == 5  # each request answered once


async def test_a_batch_that_keeps_expiring_leaves_its_requests_to_the_caller(
    batch_api: BatchApi, tmp_path: Path
) -> None:
    batch_api.batches.fates.extend([BatchFate(expire_after=1), BatchFate(expire_after=1)])
    state = BatchState.open(tmp_path / "state.json", SCOPE)
    first, second = await publish_all(runner(batch_api, state, max_attempts=2), state,
                                      scored(3))
    assert first.resubmitted == ("t1", "t2")
    assert (second.status, list(second.results), second.resubmitted) == ("expired", ["t1"], ())
    assert {cid: item.kind for cid, item in second.unanswered.items()} == {
        "t2": "batch_expired"}


async def test_a_batch_failed_at_validation_leaves_every_request_to_the_caller(
    batch_api: BatchApi, tmp_path: Path
) -> None:
    batch_api.batches.fates.append(BatchFate(fail_validation=True))
    state = BatchState.open(tmp_path / "state.json", SCOPE)
    [batch] = await publish_all(runner(batch_api, state), state, scored(3))
    assert (batch.status, batch.results) == ("failed", {})
    assert sorted(batch.unanswered) == ["t0", "t1", "t2"]
    reason = batch.unanswered["t0"]
    assert reason.kind == "batch_failed"
    assert "Enqueued token limit reached" in reason.message
    assert "token_limit_exceeded" in reason.message
    assert len(batch_api.batches.created) == 1  # not resubmitted: the caller decides


async def test_cancelled_batches_keep_their_answers_and_leave_the_rest(
    batch_api: BatchApi, tmp_path: Path
) -> None:
    clock = ManualClock()
    batch_api.batches.clock = clock
    batch_api.batches.seconds_per_state = 10.0
    state = BatchState.open(tmp_path / "state.json", SCOPE)
    polled = asyncio.Event()
    batch_runner = runner(batch_api, state, on_progress=lambda progress: polled.set())
    running = asyncio.create_task(publish_all(batch_runner, state, scored(4)))
    await polled.wait()
    clock.now += 15  # in progress, half answered
    await batch_runner.cancel()
    clock.now += 10
    [batch] = await running
    assert (batch.status, sorted(batch.results)) == ("cancelled", ["t0", "t1"])
    assert {cid: item.kind for cid, item in batch.unanswered.items()} == {
        "t2": "batch_cancelled", "t3": "batch_cancelled"}


async def test_a_runner_stopped_mid_poll_resumes_its_batches(
    batch_api: BatchApi, tmp_path: Path
) -> None:
    clock = ManualClock()
    batch_api.batches.clock = clock
    batch_api.batches.seconds_per_state = 10.0
    path = tmp_path / "state.json"
    lines = scored(5)
    limits = FileLimits(max_requests=3)
    state = BatchState.open(path, SCOPE)
    polled = asyncio.Event()
    stopped = asyncio.create_task(publish_all(
        runner(batch_api, state, limits=limits, on_progress=lambda p: polled.set()),
        state, lines))
    await polled.wait()
    stopped.cancel()  # as a replay stopped with ^C, mid-poll
    with pytest.raises(asyncio.CancelledError):
        await stopped
    assert len(batch_api.batches.created) == 2
    assert batch_api.judge.calls == []  # still validating when it stopped

    clock.now += 30
    resumed = BatchState.open(path, SCOPE)
    assert [r.status for r in resumed.records] == ["validating", "validating"]
    progress: list[Progress] = []
    finished = await publish_all(
        runner(batch_api, resumed, limits=limits, on_progress=progress.append, clock=clock),
        resumed, lines)
    assert len(batch_api.batches.created) == 2  # no batch created twice
    assert scores(finished) == {f"t{i}": i % 5 + 1 for i in range(5)}
    assert len(batch_api.judge.calls) == 5
    assert (progress[-1].done, progress[-1].total) == (5, 5)
    # Run again once everything is published: nothing to do, nothing sent.
    again = BatchState.open(path, SCOPE)
    assert await publish_all(runner(batch_api, again, limits=limits), again, lines) == []
    assert len(batch_api.batches.created) == 2


async def test_a_crash_at_any_write_resumes_with_each_batch_created_once(
    batch_api: BatchApi, tmp_path: Path
) -> None:
    lines = scored(5)
    limits = FileLimits(max_requests=3)
    expected = {f"t{i}": i % 5 + 1 for i in range(5)}
    crash_at = 0
    while True:
        crash_at += 1
        assert crash_at < 50, "the run never got past its writes"
        path = tmp_path / f"state-{crash_at}.json"
        before = len(batch_api.batches.created)
        state = CrashingState.open(path, SCOPE)
        assert isinstance(state, CrashingState)
        state.crash_at = crash_at
        yielded: list[FinishedBatch] = []
        try:
            await publish_all(runner(batch_api, state, limits=limits), state, lines, yielded)
        except Crash:
            resumed = BatchState.open(path, SCOPE)
            await publish_all(runner(batch_api, resumed, limits=limits), resumed, lines, yielded)
        else:
            assert scores(yielded) == expected
            break  # every write passed: the crash point is past the end
        # Every request answered, by the first run or the second; a batch whose marking
        # crashed is yielded again (the same verdicts, with the same ids): never lost.
        answered: dict[str, int] = {}
        for batch in yielded:
            for cid, result in batch.results.items():
                assert isinstance(result, Answered)
                assert answered.setdefault(cid, result.answer.score) == result.answer.score
        assert answered == expected, f"crash at write {crash_at}"
        created = batch_api.batches.created[before:]
        assert len(created) == 2, f"crash at write {crash_at}: {len(created)} batches"
        inputs = {(await batch_api.client.batches.retrieve(b)).input_file_id for b in created}
        assert len(inputs) == 2
    assert crash_at > 6  # it crashed at the plan, uploads, creations, statuses and marks


async def test_a_resume_that_lacks_planned_requests_is_refused(
    batch_api: BatchApi, tmp_path: Path
) -> None:
    state = BatchState.open(tmp_path / "state.json", SCOPE)
    state.add([["t0", "t1"]])
    with pytest.raises(BatchStateError, match="did not build") as refused:
        await publish_all(runner(batch_api, state), state, scored(1))
    assert "\n" not in str(refused.value)
    assert batch_api.batches.created == []


def test_unanswered_is_an_error_verdict_when_the_caller_does_not_retry() -> None:
    item = Unanswered("t", "batch_expired", "the batch expired")
    failure = item.as_failure(latency_ms=7)
    assert (failure.kind, failure.message, failure.latency_ms) == (
        "batch_expired", "the batch expired", 7)
