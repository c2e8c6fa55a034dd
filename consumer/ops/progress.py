"""Progress of a batch command: a rich bar on a terminal, periodic structlog lines otherwise.

Log lines still print above a live bar: rich swaps ``sys.stderr`` while the bar is shown and
``configure_logging`` writes to whatever ``sys.stderr`` is at the time. ``sys.stdout`` is
swapped only when it is a terminal too: redirected (``check FILE > out.txt``), what the command
prints must reach the file, not the bar's terminal.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any

import structlog
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

log = structlog.get_logger(__name__)


def interactive() -> bool:
    """True when stderr is a terminal (a person is watching)."""
    return sys.stderr.isatty()


class _Rate(ProgressColumn):
    """Items per second."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-/s" if speed is None else f"{speed:,.1f}/s", style="progress.data.speed")


class Reporter:
    """Reports ``completed`` out of ``total``; a context manager."""

    def __init__(
        self, what: str, total: int | None, *, bar: bool | None = None, interval_s: float = 5.0,
        log_lines: bool = True,
    ) -> None:
        """``bar``: draw one (default: when stderr is a terminal); without one, a log line
        every ``interval_s`` and at the end, unless ``log_lines`` is False."""
        self._what = what
        self._total = total
        self._bar = interactive() if bar is None else bar
        self._interval_s = interval_s
        self._log_lines = log_lines
        self._completed = 0
        self._started = time.monotonic()
        self._last_line = self._started
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._details: dict[str, Any] = {}

    def __enter__(self) -> Reporter:
        self._started = self._last_line = time.monotonic()
        if self._bar:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                _Rate(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
                redirect_stdout=sys.stdout.isatty(),
            )
            self._progress.start()
            self._task = self._progress.add_task(self._what, total=self._total)
        return self

    def update(self, completed: int, *, total: int | None = None, **details: Any) -> None:
        """Set how many items are done (and how many in all, once known); ``details`` go into
        the log lines, and after the bar's description."""
        self._completed = completed
        if total is not None:
            self._total = total
        if details:
            self._details = details
        if self._progress is not None and self._task is not None:
            described = ", ".join(f"{k} {v}" for k, v in details.items() if v is not None)
            description = f"{self._what} ({described})" if described else self._what
            self._progress.update(self._task, completed=completed, total=self._total,
                                  description=description)
            return
        now = time.monotonic()
        if self._log_lines and now - self._last_line >= self._interval_s:
            self._last_line = now
            self._line("progress")

    def advance(self, count: int = 1) -> None:
        """Count ``count`` more items done."""
        self.update(self._completed + count)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
        elif self._log_lines:
            self._line("finished")

    def _line(self, state: str) -> None:
        elapsed_s = time.monotonic() - self._started
        rate = self._completed / elapsed_s if elapsed_s > 0 else 0.0
        eta_s = None
        if self._total is not None and rate > 0:
            eta_s = round(max(0, self._total - self._completed) / rate, 1)
        log.info(
            f"{self._what}_{state}", completed=self._completed, total=self._total,
            rate_per_s=round(rate, 1), elapsed_s=round(elapsed_s, 1), eta_s=eta_s,
            **self._details,
        )
