"""How ``groundedness verdicts`` shows what it reads: JSON lines, or a live table.

``JsonLines`` writes each verdict as it was published, one compact JSON object a line, flushed
after each batch read (a pipe into ``jq`` sees them as they come). ``LiveTable`` (stdout a
terminal) keeps the latest verdicts that fit the screen in a rich table, redrawn in place
after each batch, with the counts so far beneath; when the command ends the last table
stays. Either way a record that is not a verdict is one line on stderr (``skipped_line``),
never on stdout.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, deque
from types import TracebackType
from typing import Any, Protocol, TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

COLUMNS = ("evaluated", "rule", "verdict", "score", "trace", "reason")
STYLES = {"pass": "green", "fail": "bold red", "error": "yellow"}
# Rows the table keeps besides the screen's height: its title, header, rules and caption.
TABLE_CHROME_ROWS = 7


class Display(Protocol):
    """Where the verdicts go."""

    def show(self, verdict: dict[str, Any]) -> None: ...

    def skipped(self, where: str, reason: str) -> None: ...

    def flush(self) -> None:
        """What was shown since the last flush, out (after each batch of records read)."""


def json_line(verdict: dict[str, Any]) -> str:
    """The verdict as one line of JSON, its fields as published."""
    return json.dumps(verdict, ensure_ascii=False, separators=(",", ":"))


def skipped_line(where: str, reason: str) -> str:
    """What is said about a record that is not a verdict."""
    return f"skipped {where}: not a verdict: {reason}"


def row(verdict: dict[str, Any]) -> tuple[str, ...]:
    """The table's cells for one verdict (``COLUMNS``)."""
    score = verdict.get("score")
    error = verdict.get("error")
    reason = verdict.get("reason") or (error.get("message") if isinstance(error, dict) else None)
    evaluated = str(verdict.get("evaluated_at") or "")
    cells = (
        evaluated.replace("T", " ")[:19],  # to the second: 2024-05-01 12:00:00
        verdict["rule"],
        verdict["verdict"],
        f"{score:.2f}" if isinstance(score, int | float) else "-",
        verdict["trace_id"],
        " ".join(str(reason or "").split()),  # one line, however the judge wrote it
    )
    # A lone surrogate (``\\ud800`` in the JSON) cannot reach a UTF-8 terminal: shown escaped.
    return tuple(cell.encode("utf-8", "backslashreplace").decode("utf-8") for cell in cells)


class JsonLines:
    """One JSON line per verdict on ``out``."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def show(self, verdict: dict[str, Any]) -> None:
        """Write the verdict's line (escaped to ASCII when it holds what UTF-8 cannot
        encode: a lone surrogate another producer wrote as ``\\ud800``)."""
        line = json_line(verdict)
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:
            line = json.dumps(verdict, separators=(",", ":"))
        self._out.write(line + "\n")

    def flush(self) -> None:
        """Out to the reader of stdout."""
        self._out.flush()

    def skipped(self, where: str, reason: str) -> None:
        """One line on stderr."""
        print(skipped_line(where, reason), file=sys.stderr, flush=True)

    def __enter__(self) -> JsonLines:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        return None


class LiveTable:
    """The latest verdicts in a table redrawn in place, and the counts so far."""

    def __init__(self, title: str, console: Console | None = None) -> None:
        self._console = console or Console()
        self._title = title
        self._rows: deque[tuple[str, ...]] = deque(maxlen=self._fitting())
        self._counts: Counter[str] = Counter()
        self._skipped = 0
        # Lines written to stderr while the table is drawn: above it, when stderr is the same
        # terminal; else they go to stderr as they are.
        self._live = Live(self.table(), console=self._console, auto_refresh=False,
                          redirect_stderr=sys.stderr.isatty())

    def show(self, verdict: dict[str, Any]) -> None:
        """Add the verdict's row (the oldest leaves once the screen is full)."""
        self._rows.append(row(verdict))
        self._counts[verdict["verdict"]] += 1

    def skipped(self, where: str, reason: str) -> None:
        """One line on stderr; counted under the table."""
        self._skipped += 1
        print(skipped_line(where, reason), file=sys.stderr, flush=True)

    def flush(self) -> None:
        """Redraw: once per batch read, not per verdict (a topic read from its beginning)."""
        self._live.update(self.table(), refresh=True)

    def table(self) -> Table:
        """The table as it stands."""
        table = Table(title=self._title, caption=self._caption(), expand=True)
        for name in COLUMNS:
            table.add_column(name, no_wrap=True, overflow="ellipsis",
                             ratio=3 if name == "reason" else None)
        for cells in self._rows:
            # Text, never markup: a trace id or a reason is the producer's, and "[/]" in it
            # would stop the table (rich's MarkupError) or "[link=...]" make a link.
            table.add_row(*(Text(cell, style=STYLES.get(cell, "") if n == 2 else "")
                            for n, cell in enumerate(cells)))
        return table

    def _caption(self) -> str:
        shown = sum(self._counts.values())
        counts = ", ".join(f"{self._counts[outcome]} {outcome}" for outcome in STYLES)
        skipped = f"; {self._skipped} not verdicts, skipped" if self._skipped else ""
        return f"{shown} shown ({counts}){skipped}"

    def _fitting(self) -> int:
        return max(1, self._console.size.height - TABLE_CHROME_ROWS)

    def __enter__(self) -> LiveTable:
        self._live.start(refresh=True)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._live.stop()  # the last table stays on the screen
