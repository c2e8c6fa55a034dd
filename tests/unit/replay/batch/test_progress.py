"""A batch replay's progress: requests done of the total, and when it should end."""

from __future__ import annotations

from typing import Any

from openai.types import Batch

from consumer.replay.batch.progress import progress_of

NOW = 1_800_000_000.0


def batch(status: str, completed: int, failed: int, total: int, **fields: Any) -> Batch:
    return Batch.model_validate({
        "id": f"batch_{status}_{completed}", "object": "batch", "endpoint": "/v1/chat/completions",
        "input_file_id": "file-1", "completion_window": "24h", "status": status,
        "created_at": int(NOW) - 1000, "expires_at": int(NOW) + 80_000,
        "request_counts": {"completed": completed, "failed": failed, "total": total}, **fields,
    })


def test_the_expected_finish_follows_the_slowest_batch_rate() -> None:
    # 100 of 400 in 100 s: 300 s to go; 50 of 100 in 100 s: 100 s to go.
    slow = batch("in_progress", 90, 10, 400, in_progress_at=int(NOW) - 100)
    quick = batch("in_progress", 50, 0, 100, in_progress_at=int(NOW) - 100)
    done = batch("completed", 20, 0, 20)
    progress = progress_of([slow, quick, done], total=520, now=NOW)
    assert (progress.done, progress.failed, progress.total, progress.running) == (
        160, 10, 520, 2)
    assert progress.expected_finish == NOW + 300
    assert progress.deadline == NOW + 80_000


def test_no_estimate_until_every_running_batch_has_a_rate() -> None:
    answering = batch("in_progress", 10, 0, 100, in_progress_at=int(NOW) - 10)
    validating = batch("validating", 0, 0, 0)
    progress = progress_of([answering, validating], total=200, now=NOW)
    assert progress.expected_finish is None
    assert progress.running == 2
    assert progress_of([batch("finalizing", 5, 0, 5, in_progress_at=int(NOW) - 9)], 5,
                       NOW).expected_finish == NOW


def test_requests_finished_by_an_earlier_run_count_as_done() -> None:
    progress = progress_of([], total=10, now=NOW, done_before=10)
    assert (progress.done, progress.running, progress.expected_finish, progress.deadline) == (
        10, 0, None, None)
