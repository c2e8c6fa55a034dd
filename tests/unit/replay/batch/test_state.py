"""The batch state file: written atomically after every change, read back as written, and
refused in one line when it is unreadable or another replay's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from consumer.errors import ConfigError
from consumer.replay.batch.state import (
    BatchRecord,
    BatchState,
    BatchStateError,
    Scope,
    default_state_path,
)

SCOPE = Scope("llm-traces", "2026-05-01T00:00:00+00:00", None, "gpt-4o-mini")


def test_a_missing_file_is_a_new_state_written_at_its_first_change(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    state = BatchState.open(path, SCOPE)
    assert (state.records, state.published, path.exists()) == ((), frozenset(), False)
    [record] = state.add([["a", "b"]])
    assert record == BatchRecord("1", ("a", "b"))
    assert BatchState.open(path, SCOPE).records == (record,)


def test_every_change_reads_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    state = BatchState.open(path, SCOPE)
    _, second = state.add([["a", "b"], ["c"]])
    state.update(BatchRecord("1", ("a", "b"), file_id="file-1", uploaded_at=5,
                             batch_id="batch_1", status="expired"))
    [third] = state.resubmit(state.records[0], [["b"]])
    state.mark_published(["a", "c"])
    again = BatchState.open(path, SCOPE)
    assert again.records == state.records
    assert [(r.key, r.attempt, r.resubmitted) for r in again.records] == [
        ("1", 1, True), ("2", 1, False), ("3", 2, False)]
    assert again.published == {"a", "c"}
    assert (again.owner("b"), again.owner("a"), again.owner("zzz")) == ("3", "1", None)
    assert third.custom_ids == ("b",)
    assert second.key == "2"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary left


def test_a_failed_write_leaves_the_previous_state_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.json"
    state = BatchState.open(path, SCOPE)
    state.add([["a"]])
    written = path.read_text()

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        state.mark_published(["a"])
    assert path.read_text() == written
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


@pytest.mark.parametrize(("content", "why"), [
    (b"{\"format\": \"groundedness-batch-replay/1\", \"scope\"", "Expecting"),
    (b"[]", "format is not"),
    (b"{\"format\": \"something-else/9\"}", "format is not"),
    (b"\xff\xfe garbage", "cannot read"),
    (json.dumps({"format": "groundedness-batch-replay/1", "scope": {"topic": "x"},
                 "batches": [], "published": []}).encode(), "missing"),
    (json.dumps({"format": "groundedness-batch-replay/1",
                 "scope": {"topic": "llm-traces", "window_from": "2026-05-01T00:00:00+00:00",
                           "window_to": None, "model": "gpt-4o-mini"},
                 "batches": [{"key": "1", "custom_ids": "abc"}], "published": []}).encode(),
     "custom_ids"),
])
def test_a_corrupt_state_file_is_refused_in_one_line(
    tmp_path: Path, content: bytes, why: str
) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(content)
    with pytest.raises(BatchStateError) as refused:
        BatchState.open(path, SCOPE)
    message = str(refused.value)
    assert "\n" not in message
    assert str(path) in message
    assert why in message
    assert isinstance(refused.value, ConfigError)  # refused at start, exit code 2


def test_another_replays_state_is_refused_naming_both(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    BatchState.open(path, SCOPE).add([["a"]])
    other = Scope("llm-traces", "2026-06-01T00:00:00+00:00", None, "gpt-4o-mini")
    with pytest.raises(BatchStateError) as refused:
        BatchState.open(path, other)
    message = str(refused.value)
    assert "\n" not in message
    assert "from 2026-05-01T00:00:00+00:00" in message
    assert "from 2026-06-01T00:00:00+00:00" in message
    assert "--batch-state" in message
    other_model = Scope(SCOPE.topic, SCOPE.window_from, None, "gpt-4o")
    with pytest.raises(BatchStateError, match="model gpt-4o-mini"):
        BatchState.open(path, other_model)


def test_the_default_path_is_named_after_the_topic_and_window(tmp_path: Path) -> None:
    scope = Scope("team/llm traces", "2026-05-01T00:00:00+00:00", "2026-05-02T00:00:00Z", "m")
    path = default_state_path(scope, tmp_path)
    assert path.parent == tmp_path
    assert path.name == (
        "batch-team_llm_traces-2026-05-01T00_00_00_00_00-2026-05-02T00_00_00Z.json")
    assert default_state_path(SCOPE).name.endswith("-end.json")
    assert default_state_path(SCOPE).parent == Path()
