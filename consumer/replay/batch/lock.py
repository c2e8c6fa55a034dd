"""One batch replay per state file at a time: an exclusive ``flock`` on ``<state>.lock``, held
for the whole run.

Two runs of one window at once (a second terminal; a Job run again while its old pod is still
terminating) would each plan, upload and create a batch for every request and each publish
every verdict, since the state file and the ledger record one run's steps, not a claim on
them. The second run is refused instead, in one line naming the holder (its pid, host and
start, written into the lock file once it holds the lock), before it reads the state or
opens a Kafka client.

The kernel releases the lock when the holder's file is closed, which the end of the process
does however it ends (SIGKILL, OOM-kill, a node's pod deleted): a killed run never leaves a
stale lock, and the next run resumes from the state as before. The file itself is left in
place: were it removed at the end, a third run could lock a new file of that name while a
second still held the old one. ``flock`` is advisory: it excludes the runs that take it, on
one host, and on a shared volume whose filesystem passes locks on (Linux NFS maps it to a
POSIX lock; a filesystem that ignores locks excludes nothing).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from consumer.replay.batch.state import BatchStateError

# How long a refused run waits for the holder to have written its name (it writes it just
# after it takes the lock, so only a run started at the same moment waits at all).
HOLDER_WAIT_S = 1.0


class StateLocked(BatchStateError):
    """Another run holds the state file: one line naming it (exit code 2)."""


def lock_path(state_path: Path) -> Path:
    """The lock beside a state file: ``<state>.lock``."""
    return state_path.with_name(f"{state_path.name}.lock")


@contextlib.contextmanager
def state_lock(state_path: Path) -> Iterator[Path]:
    """Hold the state file's lock until the block ends; ``StateLocked`` naming the holder if
    another process holds it. Yields the lock file's path."""
    path = lock_path(state_path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise BatchStateError(f"--batch-state: cannot create the lock {path}: {exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StateLocked(
                f"{state_path} is being replayed by {_holder(fd)}: wait for that run to end "
                "(or stop it), then run this command again to resume"
            ) from None
        # Step 1: the lock is ours. Step 2: our name replaces the last holder's (a killed
        # one's stays until then). Step 3, at the end: our name goes, then the lock.
        os.ftruncate(fd, 0)
        started = datetime.now(UTC).isoformat(timespec="seconds")
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {started}\n".encode(),
                  0)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the lock (as the process's end would)


def _holder(fd: int) -> str:
    """Who holds the lock, as it wrote itself into the file."""
    deadline = time.monotonic() + HOLDER_WAIT_S
    while True:
        text = os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
        if text or time.monotonic() >= deadline:
            return text or "another process (it has not written its name yet)"
        time.sleep(0.05)
