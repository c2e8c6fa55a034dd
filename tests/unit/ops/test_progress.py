"""Progress without a terminal: log lines that carry what a batch replay adds (the total once
known, requests failed, the expected finish)."""

from __future__ import annotations

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
