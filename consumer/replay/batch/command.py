"""``groundedness replay --batch``: a window's judge requests through the OpenAI Batch API, at
half the price, publishing the verdicts a synchronous replay of the window publishes.

The window is read twice, through the replay's own pipeline and rules (``replay.run_pass``,
``wiring.make_rules``: the same ``TRACE_FILTER``, ``SAMPLE_RATE`` and answer-cache decisions,
the same verdict ids, on ``trace_json`` and span topics alike); only the judge differs:

1. **collect**: the window goes through as a dry run does, with ``CollectingJudge``
   (``judges.py``) as the judge: each request it is asked is spooled to disk as one
   batch line (``spool.py``), under the digest of what the judge sees, so identical
   requests make one line. Nothing is published; each verdict id's request is noted.
2. **batch**: ``BatchRunner`` (``consumer/replay/batch/``) plans, uploads, creates and polls the
   batches, recording each step in the state file (``--batch-state``, by default named after
   the topic and window in the working directory), with progress (requests done and failed,
   the expected finish). An expired batch's requests are sent again; what the batches leave
   unanswered is kept with their reason.
3. **publish**: the window goes through the real replay path with ``AnsweringJudge``: the
   batch's answers and the traces' own errors as they are, the unanswered requests through
   the synchronous judge. The sink (``batch_published.PublishOnce``) leaves out what an
   earlier run of the same replay published (the ``<state>.published`` ledger) and prices the
   verdicts the batch answered at ``BATCH_PRICE_FACTOR`` of ``JUDGE_PRICE_*``.

One run per state file at a time: a second run of the same window while one runs is refused
in one line naming it (``lock.py``; exit code 2), so two runs never both create the batches and
both publish the verdicts.

Stopped (SIGTERM, SIGINT) or killed at any point, the same command picks up where it was: the
state holds the batches (never created twice), the ledger what was published (never sent
twice but for the one outcome a SIGKILL may catch between the broker's acknowledgement and
its line). Collecting again costs a read of the window, no judge call. Memory, measured: about
1.5 kB a request (the spool's index 250 bytes, each verdict's request key 200, the batch's
answer 1.1 kB, kept until the window is published), and one batch file's lines while it is
uploaded (up to 200 MB).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from consumer import wiring
from consumer.cost.verdict_tally import Tally
from consumer.errors import ConfigError
from consumer.ops.progress import Reporter
from consumer.pipeline.delivery.sink import VerdictSink
from consumer.redaction import redact
from consumer.replay.batch.judges import (
    AnsweringJudge,
    BatchAnswers,
    CollectingJudge,
    request_key_of,
)
from consumer.replay.batch.lock import state_lock
from consumer.replay.batch.progress import Progress
from consumer.replay.batch.published import (
    BATCH_PRICE_FACTOR,
    PublishedLedger,
    PublishOnce,
    as_billed,
    ledger_path,
)
from consumer.replay.batch.runner import (
    DEFAULT_POLLING,
    BatchApiError,
    BatchRunner,
    Polling,
    open_client,
)
from consumer.replay.batch.spool import RequestSpool
from consumer.replay.batch.state import BatchState, Scope, default_state_path
from consumer.replay.dry_run import DryRun, DryRunPrices
from consumer.replay.passes import Reading, ReplayRequest, open_reading, run_pass
from consumer.replay.summary import summarise
from consumer.rules.rule_set import RuleResults, RuleSet
from consumer.settings import Settings
from schemas.verdict import VerdictEvent

log = structlog.get_logger(__name__)

# How often the batches are looked at (tests make it shorter).
POLLING: Polling = DEFAULT_POLLING


class Collection(DryRun):
    """The collect pass: the dry run's counting, and the request each verdict came from."""

    def __init__(self, rules: RuleSet, prices: DryRunPrices) -> None:
        super().__init__(rules, prices)
        self.request_of: dict[str, str] = {}  # verdict id -> request key

    def count(self, results: RuleResults) -> None:
        """Count as the dry run does, and note each judged verdict's request."""
        super().count(results)
        for evaluation in results.evaluations:
            key = request_key_of(evaluation.result)
            if key is not None:
                self.request_of[evaluation.verdict.verdict_id] = key

    def verdicts_by_request(self) -> dict[str, list[str]]:
        """Request key -> the ids of the verdicts it answers."""
        found: dict[str, list[str]] = {}
        for verdict_id, key in self.request_of.items():
            found.setdefault(key, []).append(verdict_id)
        return found


def state_path_for(settings: Settings, request: ReplayRequest) -> tuple[Path, Scope]:
    """The state file (``--batch-state``, else named after the window here) and its scope.

    The window in UTC, however it was written (``01:00+01:00`` is ``00:00Z``), and the file as
    the path it resolves to (through a symlink): two spellings of one window or one file are
    one state, and one lock."""
    start = request.start.astimezone(UTC)
    end = request.end.astimezone(UTC) if request.end else None
    scope = Scope(request.topic, start.isoformat(), end.isoformat() if end else None,
                  settings.judge_model)
    return (request.batch_state or default_state_path(scope)).resolve(), scope


async def replay_batch(settings: Settings, request: ReplayRequest) -> dict[str, Any]:
    """The window through the Batch API; the replay's summary with a ``batch`` section."""
    if request.dry_run:
        raise ConfigError("--batch and --dry-run do not go together: a dry run sends nothing "
                          "(run --dry-run alone for the estimate)")
    if not settings.judging:
        raise ConfigError(f"--batch: RULES ({','.join(settings.rules)}) has no groundedness, "
                          "so there is no judge request to send to the Batch API")
    api_key = settings.require_api_key()
    path, scope = state_path_for(settings, request)
    if not path.parent.is_dir():
        raise ConfigError(f"--batch-state: the directory {path.parent} does not exist")
    # Held to the end: a second run of this window at once is refused here, before it reads
    # the state (it would create every batch again and publish every verdict again).
    with state_lock(path):
        state = BatchState.open(path, scope)  # another replay's file is refused here
        started = time.monotonic()
        try:
            ledger = PublishedLedger(ledger_path(path, settings.verdicts_topic,
                                                 settings.kafka_bootstrap_servers))
            spool = RequestSpool(path.parent)
        except OSError as exc:
            raise ConfigError(f"--batch-state: cannot write beside {path}: {exc}") from None
        log.info("batch_replay_starting", state=str(path), batches=len(state.records),
                 published_before=ledger.loaded)
        with ledger, spool:
            async with open_reading(settings, request) as reading:
                return await _replay(settings, request, reading, state, spool, ledger,
                                     api_key, started)


async def _replay(
    settings: Settings, request: ReplayRequest, reading: Reading, state: BatchState,
    spool: RequestSpool, ledger: PublishedLedger, api_key: str, started: float,
) -> dict[str, Any]:
    report = BatchReport(state, spool)
    # 1. collect
    rules = wiring.make_rules(settings, CollectingJudge(settings.judge_model, spool))
    collection = Collection(rules, DryRunPrices.of(settings, request.price_per_million_tokens))
    try:
        collected = await run_pass(settings, request, reading, rules, dry=collection,
                                   what="batch_collect", log_context={"batch_collect": True},
                                   started=started)
    finally:
        await rules.close()
    log.info("batch_requests_collected", requests=len(spool), bytes=spool.size_bytes,
             verdicts=len(collection.request_of))
    if not collected["complete"]:
        return report.stopped(settings, request, collected["records"], started)
    # 2. batch
    answers = BatchAnswers()
    async with open_client(api_key, settings.openai_base_url) as client:
        with Reporter("batch", len(spool)) as progress:
            runner = BatchRunner(client, state, polling=POLLING,
                                 on_progress=lambda p: _report_progress(progress, p))

            async def send() -> None:
                try:
                    async for finished in runner.run(spool):
                        answers.add(finished)
                except BatchApiError as exc:  # the server's words: no secret printed
                    raise BatchApiError(redact(str(exc), settings.secrets())) from None

            finished_all = await _unless(reading.interrupted, send())
    report.answers = answers
    if not finished_all:
        log.warning("batch_replay_stopped", state=str(state.path),
                    detail="the batches go on at OpenAI: run the same command again to "
                           "pick them up")
        return report.stopped(settings, request, collected["records"], started)
    # 3. publish
    by_request = collection.verdicts_by_request()

    def published(key: str) -> bool:
        ids = by_request.get(key, [])
        return bool(ids) and all(verdict_id in ledger for verdict_id in ids)

    answering = AnsweringJudge(answers, wiring.make_judge(settings), published)
    report.answering = answering

    def settled(verdict: VerdictEvent) -> VerdictEvent:
        # Of the verdicts sharing one request, the lowest id bills it: the same on every run,
        # however a run is interrupted, and whatever JUDGE_CACHE_SIZE says.
        key = collection.request_of.get(verdict.verdict_id)
        by_batch = key is not None and answering.answered_by_batch(key)
        first = key is not None and verdict.verdict_id == min(by_request[key])
        return as_billed(verdict, by_batch=by_batch, first=first)

    def publish_once(sink: VerdictSink) -> VerdictSink:
        report.sink = PublishOnce(sink, ledger, settled)
        return report.sink

    # No answer cache here: which verdict of a shared request bills it is ``settled``'s call.
    rules = wiring.make_rules(settings.model_copy(update={"judge_cache_size": 0}), answering)
    try:
        summary = await run_pass(settings, request, reading, rules, wrap_sink=publish_once,
                                 started=started)
    finally:
        await rules.close()
    summary["batch"] = report.summary()
    if report.nothing_new(summary):
        log.warning("batch_replay_nothing_new", state=str(state.path),
                    detail="every verdict of this window was published by an earlier run")
    return summary


class BatchReport:
    """What the summary's ``batch`` section says, gathered as the replay goes."""

    def __init__(self, state: BatchState, spool: RequestSpool) -> None:
        self.state = state
        self.spool = spool
        self.answers = BatchAnswers()
        self.answering: AnsweringJudge | None = None
        self.sink: PublishOnce | None = None

    def summary(self) -> dict[str, Any]:
        """The ``batch`` section."""
        records = self.state.records
        unanswered = Counter(item.kind for item in self.answers.unanswered.values())
        sent = self.answering.sent_synchronously if self.answering else Counter()
        return {
            "state_file": str(self.state.path),
            "batches": len(records),
            "batches_expired": sum(record.status == "expired" for record in records),
            "requests": len(self.spool),
            "answered_by_batch": len(self.answers.results),
            "unanswered_by_batch": dict(sorted(unanswered.items())),
            "sent_synchronously": sum(sent.values()),
            "resubmitted": sum(len(record.custom_ids) for record in records
                               if record.attempt > 1),
            "already_published": self.sink.already_published if self.sink else 0,
            "repeated_in_window": self.sink.repeated if self.sink else 0,
            "price_factor": BATCH_PRICE_FACTOR,
        }

    def nothing_new(self, summary: dict[str, Any]) -> bool:
        """Nothing published by this run, everything by an earlier one."""
        published = sum(int(summary[kind]) for kind in ("pass", "fail", "error"))
        return published == 0 and int(summary["batch"]["already_published"]) > 0

    def stopped(self, settings: Settings, request: ReplayRequest, records: int,
                started: float) -> dict[str, Any]:
        """The summary of a replay stopped before it published."""
        summary = summarise(request.describe(False), records, time.monotonic() - started,
                            Counter(), settings.rules, Tally())
        summary["batch"] = self.summary()
        return summary


def _report_progress(progress: Reporter, seen: Progress) -> None:
    progress.update(seen.done + seen.failed, total=seen.total, done=seen.done,
                    failed=seen.failed, running=seen.running,
                    expected_finish=_iso(seen.expected_finish), deadline=_iso(seen.deadline))


def _iso(epoch_s: float | None) -> str | None:
    if epoch_s is None:
        return None
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="seconds")


async def _unless(stop: asyncio.Event, work: Awaitable[None]) -> bool:
    """Run ``work`` unless ``stop`` is set first (then cancel it); True if it finished."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return False
    task.result()  # what it raised, if anything
    return True
