"""Progress without a terminal: log lines that carry what a batch replay adds (the total once
known, requests failed, the expected finish)."""

from __future__ import annotations

import io
import sys

import pytest
from structlog.testing import capture_logs

from consumer.ops.progress import Reporter


@pytest.mark.usefixtures("default_structlog")  # info lines, whatever another test set
def test_log_lines_carry_the_total_once_known_and_the_details() -> None:
    with capture_logs() as logs, Reporter("batch", None, bar=False, interval_s=0.0) as progress:
        progress.update(0)
        progress.update(30, total=120, done=28, failed=2,
                        expected_finish="2026-12-01T08:00:00+00:00")
    lines = [e for e in logs if e["event"].startswith("batch_")]
    assert [e["event"] for e in lines] == ["batch_progress", "batch_progress", "batch_finished"]
    assert (lines[0]["total"], "failed" in lines[0]) == (None, False)
    last = lines[-1]
    assert {k: last[k] for k in ("completed", "total", "done", "failed", "expected_finish")} == {
        "completed": 30, "total": 120, "done": 28, "failed": 2,
        "expected_finish": "2026-12-01T08:00:00+00:00"}


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as a person's stderr does."""

    def isatty(self) -> bool:
        return True


def test_a_bar_on_the_terminal_leaves_a_redirected_stdout_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``groundedness check FILE > out.txt`` on a terminal: the bar is drawn on stderr, and
    what the command prints still goes to the file, not above the bar."""
    out, err = io.StringIO(), Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    with Reporter("check", 2, bar=True) as progress:
        print('{"verdict": "pass"}', flush=True)
        progress.advance(2)
    assert out.getvalue() == '{"verdict": "pass"}\n'
    assert "2/2" in err.getvalue()
