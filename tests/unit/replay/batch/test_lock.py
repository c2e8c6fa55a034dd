"""The state file's lock: a second holder is refused naming the first; the lock goes with the
block, and with the process that held it, however it ended (SIGKILL: no stale lock)."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from consumer.replay.batch import lock
from consumer.replay.batch.command import state_path_for
from consumer.replay.batch.lock import StateLocked, lock_path, state_lock
from consumer.replay.batch.state import BatchStateError
from consumer.replay.passes import ReplayRequest
from consumer.settings import load_settings

HOLD = """
import sys, time
from pathlib import Path
from consumer.replay.batch.lock import state_lock
with state_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_second_holder_is_refused_in_one_line_naming_the_first(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    with state_lock(state) as path:
        assert path == lock_path(state) == tmp_path / "state.json.lock"
        with pytest.raises(StateLocked) as refused, state_lock(state):
            pytest.fail("locked twice")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{state} is being replayed by pid {os.getpid()} on "
                              f"{socket.gethostname()} since ")
    assert isinstance(refused.value, BatchStateError), "a ConfigError: exit code 2"


def test_the_lock_is_released_with_the_block_and_the_file_stays(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    with state_lock(state):
        pass
    with state_lock(state):
        assert lock_path(state).read_text().startswith(f"pid {os.getpid()} on ")
    assert lock_path(state).read_text() == "", "the file stays, without a holder"


def test_a_holder_killed_leaves_no_stale_lock(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, str(state)], stdout=subprocess.PIPE,
        env=os.environ | {"PYTHONPATH": str(Path(lock.__file__).parents[3])},
    ) as holder:
        assert holder.stdout is not None
        assert holder.stdout.readline() == b"held\n"
        with pytest.raises(StateLocked, match=f"by pid {holder.pid} on "), state_lock(state):
            pytest.fail("locked while another process holds it")
        holder.send_signal(signal.SIGKILL)
        assert holder.wait(timeout=10) == -signal.SIGKILL
    with state_lock(state):
        assert f"pid {os.getpid()} " in lock_path(state).read_text()


def test_a_holder_that_has_not_written_its_name_yet_is_still_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = tmp_path / "state.json"
    monkeypatch.setattr(lock, "HOLDER_WAIT_S", 0.1)
    fd = os.open(lock_path(state), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held, the file still empty
        started = time.monotonic()
        with pytest.raises(StateLocked, match="by another process"), state_lock(state):
            pytest.fail("locked twice")
        assert time.monotonic() - started < 2
    finally:
        os.close(fd)


def test_a_directory_the_lock_cannot_be_made_in_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(BatchStateError, match="cannot create the lock"), state_lock(
            tmp_path / "missing" / "state.json"):
        pytest.fail("locked in a missing directory")


def test_two_spellings_of_one_window_or_one_file_are_one_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--from 2020-01-01`` and ``--from 2020-01-01T01:00:00+01:00`` are one instant; a
    symlink to a state file is that file: each pair one state, so one lock."""
    monkeypatch.chdir(tmp_path)
    settings = load_settings(require_threshold=False)
    utc = datetime(2020, 1, 1, tzinfo=UTC)
    paris = datetime(2020, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    one, scope_one = state_path_for(settings, ReplayRequest("t", utc, None, batch=True))
    two, scope_two = state_path_for(settings, ReplayRequest("t", paris, None, batch=True))
    assert (one, scope_one) == (two, scope_two)
    real = tmp_path / "state.json"
    real.write_text("{}")
    (tmp_path / "link.json").symlink_to(real)
    by_link, _ = state_path_for(settings, ReplayRequest("t", utc, None, batch=True,
                                                        batch_state=Path("link.json")))
    assert by_link == real
