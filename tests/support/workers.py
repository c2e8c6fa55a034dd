"""The real worker as a subprocess (``groundedness run``), so SIGKILL and SIGTERM are real.

``WorkerPool`` starts workers with an environment, stops them with SIGTERM (returning the
exit code) or SIGKILL, and keeps each one's stderr in a file for assertions; whatever is
still running when the pool closes is killed. ``VerdictCollector`` reads the verdicts topic
in the background while the workers run, and ``scored_stream`` makes traces whose correct
verdict is known from their ``[[score=N]]`` marker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from aiokafka import AIOKafkaConsumer

from consumer.settings import Settings
from tests.support.streams import group_offsets, trace

REPO_ROOT = Path(__file__).resolve().parents[2]
GROUNDEDNESS = REPO_ROOT / ".venv" / "bin" / "groundedness"
THRESHOLD = 0.5
# The worker's own variables are dropped from the inherited environment, so a developer's
# shell (DELIVERY, KAFKA_*, OPENAI_API_KEY...) cannot change what a test runs.
WORKER_VARIABLES = frozenset(name.upper() for name in Settings.model_fields)


def worker_env(bootstrap_env: dict[str, str], judge_url: str, **overrides: str) -> dict[str, str]:
    """The environment of a test worker (or command): topics, the fake judge, quiet logs, no
    health port; ``overrides`` (variable names, upper case) replace or add to it.

    ``bootstrap_env`` is ``Topics.env(bootstrap)``, or ``{}`` for a command without Kafka.
    """
    return {
        **bootstrap_env,
        "OPENAI_API_KEY": "sk-test-secret-value",
        "OPENAI_BASE_URL": judge_url,
        "JUDGE_MODEL": "scripted-judge",
        "MIN_ACCEPTABLE_SCORE": str(THRESHOLD),
        "JUDGE_MAX_CONCURRENCY": "8",
        "JUDGE_TIMEOUT_SECONDS": "10",
        "LOG_LEVEL": "warning",
        "HEALTH_PORT": "0",
        # Off unless a test is about it: many send one text many times to count judge calls.
        "JUDGE_CACHE_SIZE": "0",
        **overrides,
    }


@dataclass
class Worker:
    """One ``groundedness run`` process and the file its stderr goes to."""

    name: str
    process: asyncio.subprocess.Process
    log_path: Path
    started_at: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid

    @property
    def running(self) -> bool:
        """True until the process has exited (and been reaped)."""
        return self.process.returncode is None

    def log(self) -> str:
        """Everything the worker wrote to stderr so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def events(self) -> list[dict[str, Any]]:
        """The JSON log lines written so far (other lines are skipped)."""
        found = []
        for line in self.log().splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    found.append(event)
        return found

    async def wait_for_log(self, text: str, timeout_s: float) -> bool:
        """Wait until ``text`` appears in the worker's stderr; False on timeout or exit."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.log():
                return True
            if not self.running:
                return False
            await asyncio.sleep(0.1)
        return text in self.log()

    async def terminate(self, timeout_s: float = 60.0) -> int:
        """SIGTERM (a graceful drain); the exit code. Fails the test if it does not exit."""
        if self.running:
            self.process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.process.wait(), timeout_s)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
            raise AssertionError(f"{self.name} ignored SIGTERM for {timeout_s}s") from None

    async def kill(self) -> int:
        """SIGKILL: no drain, no commit, no leaving the group; the exit code (-9)."""
        if self.running:
            self.process.kill()
        return await self.process.wait()


class WorkerPool:
    """Starts workers with stderr in ``log_dir``; kills any still running on exit."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.workers: list[Worker] = []

    async def start(self, env: dict[str, str], name: str | None = None) -> Worker:
        """Start ``groundedness run`` with ``env`` over a cleaned copy of this environment."""
        name = name or f"worker-{len(self.workers) + 1}"
        log_path = self.log_dir / f"{name}.stderr"
        full_env = {k: v for k, v in os.environ.items() if k.upper() not in WORKER_VARIABLES}
        with _open_for_append(log_path) as stderr:
            process = await asyncio.create_subprocess_exec(
                str(GROUNDEDNESS), "run", env=full_env | env, cwd=str(REPO_ROOT),
                stdin=asyncio.subprocess.DEVNULL, stdout=stderr, stderr=stderr,
            )
        worker = Worker(name, process, log_path)
        self.workers.append(worker)
        return worker

    def running(self) -> list[Worker]:
        """The workers that have not exited."""
        return [w for w in self.workers if w.running]

    async def __aenter__(self) -> WorkerPool:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for worker in self.running():
            await worker.kill()


def _open_for_append(path: Path) -> IO[bytes]:
    return path.open("ab")


def tracebacks(text: str) -> list[str]:
    """The log lines that carry a Python traceback (plain or inside a JSON field)."""
    return [line for line in text.splitlines() if "Traceback (most recent call last)" in line]


# -- traces with known verdicts -------------------------------------------------------------


def expected_verdict(score: int, threshold: float = THRESHOLD) -> str:
    """What a judge score of ``score`` (1-5) must become."""
    return "pass" if (score - 1) / 4 >= threshold else "fail"


def scored_stream(
    count: int, *, empty_every: int = 10, seed: int = 7, prefix: str = "t"
) -> tuple[list[bytes | None], dict[str, int], set[str]]:
    """``count`` traces: (values, score by non-empty trace id, empty trace ids).

    Every ``empty_every``-th trace has an empty output (no verdict allowed); the others carry
    a ``[[score=N]]`` marker, so each one's correct verdict is known.
    """
    rng = random.Random(seed)
    values: list[bytes | None] = []
    scores: dict[str, int] = {}
    empty: set[str] = set()
    for i in range(count):
        trace_id = f"{prefix}-{i:06d}"
        if i % empty_every == empty_every - 1:
            empty.add(trace_id)
            values.append(trace(trace_id, rng.choice([None, "", "   "])))
        else:
            score = rng.randint(1, 5)
            scores[trace_id] = score
            values.append(trace(trace_id, f"Answer {i}. [[score={score}]]",
                                retrieved_documents=[f"Document for {trace_id}."]))
    return values, scores, empty


@dataclass
class Tally:
    """What the verdicts topic holds, measured against the expected verdicts."""

    missing: set[str]
    unexpected: set[str]  # verdicts for traces that must have none (empty or unknown)
    wrong: list[str]  # a verdict that does not match its score marker
    duplicates: int  # verdicts beyond one per trace
    unstable_ids: list[str]  # traces whose repeated verdicts carry different ids


def tally(verdicts: list[dict[str, Any]], scores: dict[str, int]) -> Tally:
    """Compare the published verdicts with the scores the traces were scripted with."""
    per_trace = Counter(v["trace_id"] for v in verdicts)
    ids: dict[str, set[str]] = {}
    wrong = []
    for verdict in verdicts:
        trace_id = verdict["trace_id"]
        ids.setdefault(trace_id, set()).add(verdict["verdict_id"])
        score = scores.get(trace_id)
        if score is None:
            continue
        if (verdict["verdict"], verdict["score"]) != (expected_verdict(score), (score - 1) / 4):
            wrong.append(f"{trace_id}: {verdict['verdict']} {verdict['score']} (marker {score})")
    return Tally(
        missing=set(scores) - set(per_trace),
        unexpected=set(per_trace) - set(scores),
        wrong=wrong,
        duplicates=sum(n - 1 for n in per_trace.values()),
        unstable_ids=sorted(t for t, found in ids.items() if len(found) > 1),
    )


class VerdictCollector:
    """Reads a verdicts topic from the start, in the background, while workers run."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
            enable_auto_commit=False, isolation_level="read_committed",
        )
        self.verdicts: list[dict[str, Any]] = []
        self.arrived_at: list[float] = []  # time.monotonic() each verdict was read at
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> VerdictCollector:
        await self._consumer.start()
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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
                    self.verdicts.append(json.loads(record.value or b"{}"))
                    self.arrived_at.append(now)

    def trace_ids(self) -> set[str]:
        """The traces that have at least one verdict so far."""
        return {v["trace_id"] for v in self.verdicts}

    async def wait_for(self, trace_ids: set[str], timeout_s: float) -> bool:
        """Wait until every one of ``trace_ids`` has a verdict; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if trace_ids <= self.trace_ids():
                return True
            await asyncio.sleep(0.2)
        return trace_ids <= self.trace_ids()

    async def wait_for_count(self, count: int, timeout_s: float) -> bool:
        """Wait until at least ``count`` verdicts were read; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.verdicts) >= count:
                return True
            await asyncio.sleep(0.05)
        return len(self.verdicts) >= count


async def wait_committed(
    bootstrap: str, group: str, topic: str, timeout_s: float
) -> tuple[dict[int, int], dict[int, int]]:
    """Poll the group's committed offsets until they equal the end offsets (or time out);
    returns the last (committed, ends) seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        committed, ends = await group_offsets(bootstrap, group, topic)
        if committed == ends or time.monotonic() >= deadline:
            return committed, ends
        await asyncio.sleep(0.5)
