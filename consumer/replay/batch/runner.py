"""A replay's judge requests through the OpenAI Batch API, resumable from its state file.

``BatchRunner.run(lines)`` goes, for the requests the state does not hold yet and for every
batch it holds that has not finished:

1. plan: the new requests cut into files within the endpoint's limits (``plan.py``), one record
   each in the state;
2. upload each file (purpose ``batch``) and create its batch (24 h window), each step written
   to the state before the next; a batch a crash left unrecorded is found by its file, never
   created twice;
3. poll the running batches, every ``Polling`` delay (doubling, capped), reporting
   ``Progress``; a poll that fails for a moment (a 5xx, a 429, no connection) is tried again;
4. yield each finished batch as a ``FinishedBatch``: its output and error files read the way
   the synchronous judge reads an answer (``outcomes.py``), only for the requests whose
   verdicts are not published yet. An expired batch is reported (a warning) and its
   unanswered requests are sent again in new batches, ``max_attempts`` times in all; a batch
   that failed or was cancelled leaves its requests ``Unanswered`` for the caller.

The caller publishes a finished batch's verdicts, then ``state.mark_published(ids)``: a crash
in between publishes them again on the next run (with the same verdict ids), never loses one.
(``replay --batch`` keeps its own ledger of verdict ids instead, and marks nothing: several
verdicts can share a request, so every run is given every answer.) A call that fails for
good (an upload, a create, a download, or a poll refused rather than failing for a moment)
raises ``BatchApiError``, one line, with the state kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

import openai
import structlog
from openai import AsyncOpenAI
from openai.types import Batch

from consumer.jsonl import decode_text, numbered_lines
from consumer.judge.failures import Action, classify
from consumer.judge.result import JudgeResult
from consumer.replay.batch.outcomes import Outcome, Unanswered, read_result_line
from consumer.replay.batch.plan import FileLimits, plan_ids
from consumer.replay.batch.progress import Progress, progress_of
from consumer.replay.batch.requests import CHAT_COMPLETIONS_URL, BatchLine
from consumer.replay.batch.state import BatchRecord, BatchState, BatchStateError

log = structlog.get_logger(__name__)

MAX_ATTEMPTS = 3  # an expired batch's requests are sent twice more at most
# Why a finished batch has no line for a request, by the batch's status.
_MISSING = {
    "expired": ("batch_expired", "the batch expired before answering this request"),
    "cancelled": ("batch_cancelled", "the batch was cancelled before answering this request"),
}
_NO_LINE = ("batch_missing_result", "the batch finished without a line for this request")


class BatchApiError(BatchStateError):
    """A Batch API call failed for good (refused, the endpoint has no Batch API, or the
    network is gone): one line. The state is kept, so the same command resumes."""


@dataclass(frozen=True, slots=True)
class Polling:
    """How often running batches are looked at: ``first_s``, doubling up to ``max_s``."""

    first_s: float = 5.0
    max_s: float = 60.0

    def delays(self) -> Iterator[float]:
        """The waits between polls."""
        delay = self.first_s
        while True:
            yield delay
            delay = min(self.max_s, delay * 2)


@dataclass(frozen=True, slots=True)
class FinishedBatch:
    """One batch's outcomes for the requests whose verdicts are not published yet."""

    batch_id: str
    status: str  # completed, expired, failed or cancelled
    results: dict[str, JudgeResult]  # answers and the traces' own errors: verdicts as they are
    unanswered: dict[str, Unanswered]  # for the synchronous judge, or error verdicts
    resubmitted: tuple[str, ...]  # an expired batch's requests, sent again in new batches


DEFAULT_LIMITS = FileLimits()
DEFAULT_POLLING = Polling()
# One call's limit: an upload may be a whole file (up to 200 MB).
CALL_TIMEOUT_S = 600.0


def open_client(api_key: str, base_url: str | None) -> AsyncOpenAI:
    """The SDK client the runner talks to the Batch API through. The SDK's own retries are
    off: a ``batches.create`` retried after a lost answer would start a second batch (paid
    twice). The runner tries failed polls again itself; a failed upload, create or download
    ends the run, and the next run resumes from the state (finding a batch created on its
    file before it creates one)."""
    return AsyncOpenAI(api_key=api_key, base_url=base_url, max_retries=0,
                       timeout=CALL_TIMEOUT_S)


class BatchRunner:
    """Sends a replay's requests as batches and yields each batch's outcomes as it finishes."""

    def __init__(
        self,
        client: AsyncOpenAI,
        state: BatchState,
        *,
        limits: FileLimits = DEFAULT_LIMITS,
        polling: Polling = DEFAULT_POLLING,
        max_attempts: int = MAX_ATTEMPTS,
        on_progress: Callable[[Progress], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._state = state
        self._limits = limits
        self._polling = polling
        self._max_attempts = max_attempts
        self._on_progress = on_progress
        self._clock = clock
        self._seen: dict[str, Batch] = {}  # batch id -> its latest state, this run

    async def run(
        self, lines: Iterable[BatchLine] | Mapping[str, BatchLine]
    ) -> AsyncIterator[FinishedBatch]:
        """Every request of ``lines`` through batches; the outcomes of each batch as it
        finishes. On a second run with the same state (after a stop or a crash) only what is
        left is done: requests already planned are not planned again, nor published ones
        yielded again. ``lines`` must hold every request the state planned.

        ``lines`` may be a mapping of custom id to line that reads each line when asked (a
        spool on disk): the runner then holds no more than one batch file's lines at once."""
        requests = (lines if isinstance(lines, Mapping)
                    else {line.custom_id: line for line in lines})
        self._plan(requests)
        try:
            async for finished in self._run(requests):
                yield finished
        except (openai.OpenAIError, ValueError) as exc:
            failure = classify(exc)
            raise BatchApiError(
                f"the Batch API failed ({failure.kind}: {failure.message}); the state in "
                f"{self._state.path} is kept: run the same command again to resume"
            ) from None

    async def _run(self, requests: Mapping[str, BatchLine]) -> AsyncIterator[FinishedBatch]:
        yielded: set[str] = set()
        delays = self._polling.delays()
        while True:
            for record in self._state.records:
                if not record.finished:
                    await self._start(record, requests)
            await self._poll()
            planned = len(self._state.records)
            for record in self._state.records:
                if record.finished and record.key not in yielded:
                    yielded.add(record.key)
                    if (finished := await self._finish(record, requests)) is not None:
                        yield finished
            if len(self._state.records) > planned:
                delays = self._polling.delays()  # resubmitted: start the new batches at once
                continue
            if all(record.finished for record in self._state.records):
                return
            await asyncio.sleep(next(delays))

    async def cancel(self) -> None:
        """Cancel every batch still running (``run`` then yields them as cancelled)."""
        for record in self._state.records:
            if record.batch_id is not None and not record.finished:
                with contextlib.suppress(openai.ConflictError):  # it finished meanwhile
                    await self._client.batches.cancel(record.batch_id)

    def _plan(self, requests: Mapping[str, BatchLine]) -> None:
        planned = self._state.planned()
        # Sizes only: each line is read and let go (a spool's lines stay on disk).
        groups = plan_ids(((cid, len(requests[cid].data)) for cid in requests
                           if cid not in planned), self._limits)
        if groups:
            self._state.add(groups)
        if missing := planned - requests.keys() - self._state.published:
            raise BatchStateError(
                f"{self._state.path} holds {len(missing):,} requests this replay did not build "
                f"(one is {min(missing)}): the window's traces differ from the first run's"
            )

    async def _start(self, record: BatchRecord, requests: Mapping[str, BatchLine]) -> None:
        """Upload the record's file and create its batch, as far as not done yet."""
        file_id, uploaded_at = record.file_id, record.uploaded_at
        if file_id is None:
            data = b"".join(requests[cid].data for cid in record.custom_ids)
            name = f"groundedness-replay-{record.key}.jsonl"
            uploaded = await self._client.files.create(
                file=(name, data, "application/jsonl"), purpose="batch"
            )
            file_id, uploaded_at = uploaded.id, uploaded.created_at
            record = replace(record, file_id=file_id, uploaded_at=uploaded_at, status="uploaded")
            self._state.update(record)
        if record.batch_id is None:
            batch = await self._created_before(file_id, uploaded_at)
            if batch is None:
                batch = await self._client.batches.create(
                    input_file_id=file_id,
                    endpoint=CHAT_COMPLETIONS_URL,
                    completion_window="24h",
                    metadata={"groundedness_replay": self._state.scope.describe()[:512],
                              "part": record.key},
                )
            log.info("batch_created", batch_id=batch.id, requests=len(record.custom_ids),
                     attempt=record.attempt)
            self._seen[batch.id] = batch
            self._state.update(replace(record, batch_id=batch.id, status=batch.status))

    async def _created_before(self, file_id: str, uploaded_at: int | None) -> Batch | None:
        """The batch already created on ``file_id`` (by a run that crashed before recording
        it), if any: batches are listed newest first, down to the file's upload."""
        async for batch in self._client.batches.list(limit=100):
            if batch.input_file_id == file_id:
                return batch
            if uploaded_at is not None and batch.created_at < uploaded_at:
                return None
        return None

    async def _poll(self) -> None:
        """The latest state of every running batch; each change of status written."""
        for record in self._state.records:
            if record.batch_id is None or record.finished:
                continue
            try:
                batch = await self._client.batches.retrieve(record.batch_id)
            except (openai.OpenAIError, ValueError) as exc:
                failure = classify(exc)
                if failure.action not in (Action.RETRY, Action.WAIT, Action.HOLD_OR_ERROR):
                    raise
                log.warning("batch_poll_failed", batch_id=record.batch_id, error=failure.kind)
                continue
            self._seen[batch.id] = batch
            if batch.status != record.status:
                self._state.update(replace(record, status=batch.status))
        if self._on_progress is not None:
            self._on_progress(self._progress())

    def _progress(self) -> Progress:
        seen = self._seen.keys()
        done_before = sum(  # batches finished by an earlier run, not looked at again
            len(self._owned(record)) for record in self._state.records
            if record.finished and record.batch_id not in seen
        )
        return progress_of(self._seen.values(), len(self._state.planned()), self._clock(),
                           done_before)

    def _owned(self, record: BatchRecord) -> list[str]:
        """The record's requests that are its own (not sent again later)."""
        return [cid for cid in record.custom_ids if self._state.owner(cid) == record.key]

    async def _finish(
        self, record: BatchRecord, requests: Mapping[str, BatchLine]
    ) -> FinishedBatch | None:
        """The outcomes of a finished batch's unpublished requests; an expired batch's
        unanswered ones sent again first. None when nothing is left to publish."""
        published = self._state.published
        owned = [cid for cid in self._owned(record) if cid not in published]
        if not owned or record.batch_id is None:
            return None
        batch = self._seen.get(record.batch_id)
        if batch is None:
            batch = self._seen[record.batch_id] = await self._client.batches.retrieve(
                record.batch_id)
        outcomes = await self._outcomes(batch, set(owned))
        resubmitted: tuple[str, ...] = ()
        if batch.status == "expired":
            resubmitted = self._resubmit(record, outcomes, requests)
            log.warning("batch_expired", batch_id=batch.id, requests=len(record.custom_ids),
                        answered=len(owned) - _expired_count(outcomes),
                        resubmitted=len(resubmitted), attempt=record.attempt)
        elif batch.status == "failed":
            log.warning("batch_failed", batch_id=batch.id, requests=len(owned),
                        reason=_failure_reason(batch))
        left = [cid for cid in owned if cid not in set(resubmitted)]
        return FinishedBatch(
            batch_id=batch.id,
            status=batch.status,
            results={c: o for c in left if not isinstance(o := outcomes[c], Unanswered)},
            unanswered={c: o for c in left if isinstance(o := outcomes[c], Unanswered)},
            resubmitted=resubmitted,
        )

    async def _outcomes(self, batch: Batch, owned: set[str]) -> dict[str, Outcome]:
        """Every owned request's outcome: its line in the output or error file, else why the
        batch gave it none."""
        if batch.status == "failed":
            reason = _failure_reason(batch)
            return {cid: Unanswered(cid, "batch_failed", reason) for cid in owned}
        latency_ms = _latency_ms(batch)
        outcomes: dict[str, Outcome] = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id is None:
                continue
            content = await self._client.files.content(file_id)
            for _, text in numbered_lines(decode_text(content.content)):
                line = read_result_line(text, latency_ms)
                if line is not None and line.custom_id in owned:
                    outcomes[line.custom_id] = line.outcome
        kind, message = _MISSING.get(batch.status, _NO_LINE)
        for cid in owned - outcomes.keys():
            outcomes[cid] = Unanswered(cid, kind, message)
        return outcomes

    def _resubmit(
        self, record: BatchRecord, outcomes: dict[str, Outcome],
        requests: Mapping[str, BatchLine],
    ) -> tuple[str, ...]:
        """An expired batch's unanswered requests, in new records (unless out of attempts)."""
        expired = [cid for cid in record.custom_ids if cid in outcomes
                   and isinstance(o := outcomes[cid], Unanswered) and o.kind == "batch_expired"]
        if not expired or record.attempt >= self._max_attempts:
            return ()
        groups = plan_ids(((cid, len(requests[cid].data)) for cid in expired), self._limits)
        self._state.resubmit(record, groups)
        return tuple(expired)


def _expired_count(outcomes: dict[str, Outcome]) -> int:
    return sum(isinstance(o, Unanswered) and o.kind == "batch_expired" for o in outcomes.values())


def _failure_reason(batch: Batch) -> str:
    """A failed batch's reason in one line: its first validation error, and how many more."""
    errors = batch.errors.data if batch.errors is not None and batch.errors.data else []
    if not errors:
        return "the batch failed without a reason"
    first = errors[0]
    where = f"line {first.line}: " if first.line is not None else ""
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"the batch failed validation: {where}{first.message} ({first.code}){more}"[:300]


def _latency_ms(batch: Batch) -> int:
    """From the batch's creation to its end: how long its answers took."""
    ended = batch.completed_at or batch.expired_at or batch.cancelled_at or batch.failed_at
    return max(0, (ended - batch.created_at) * 1000) if ended else 0
