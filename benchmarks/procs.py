"""Child processes of a benchmark, and what /proc says about them (CPU time, memory)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import IO, Any

BIN = Path(sys.executable).parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used (``/proc/PID/stat``)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def memory_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) in MB (``/proc/PID/status``)."""
    found: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0]) / 1024
    return found


def run_and_wait_s(pid: int) -> tuple[float, float]:
    """Seconds the process's main thread ran on a CPU, and waited runnable for one (its
    run queue delay: time lost to other processes, ``/proc/PID/schedstat``)."""
    ran, waited, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(ran) / 1e9, int(waited) / 1e9


def machine_load() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages."""
    return os.getloadavg()


@dataclass
class Child:
    """A process under measurement: its pid, start time, and where its logs went."""

    name: str
    process: subprocess.Popen[bytes]
    started_at: float  # time.monotonic() just before Popen
    log_path: Path
    rss_samples: list[tuple[float, float]] = field(default_factory=list)  # (t, MB)

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid

    def alive(self) -> bool:
        """True while it runs."""
        return self.process.poll() is None

    def cpu_s(self) -> float:
        """CPU seconds so far."""
        return cpu_seconds(self.pid)

    def run_and_wait_s(self) -> tuple[float, float]:
        """Its main thread's seconds on a CPU and waiting for one, so far."""
        return run_and_wait_s(self.pid)

    def memory(self) -> dict[str, float]:
        """Current and peak RSS in MB."""
        return memory_mb(self.pid)

    async def sample_rss(self, every_s: float = 1.0) -> None:
        """Append (seconds since start, RSS MB) every ``every_s`` until cancelled or exited."""
        while self.alive():
            with contextlib.suppress(OSError, KeyError):
                rss = self.memory()["VmRSS"]
                self.rss_samples.append((time.monotonic() - self.started_at, rss))
            await asyncio.sleep(every_s)

    def log_tail(self, lines: int = 15) -> str:
        """The end of its stderr/stdout, for error messages."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def stop(self, grace_s: float = 15.0) -> int:
        """SIGTERM, wait up to ``grace_s``, then SIGKILL; returns the exit code."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.to_thread(self.process.wait, grace_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def spawn(
    name: str, argv: list[str], env: dict[str, str], log_dir: Path, stdout: int | IO[bytes] | None
    = None,
) -> Child:
    """Start ``argv`` with ``env``; stderr (and stdout unless given) go to ``log_dir/NAME.log``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    log = log_path.open("wb")
    started = time.monotonic()
    process = subprocess.Popen(
        argv, env=env, stdout=stdout if stdout is not None else log, stderr=log,
        stdin=subprocess.DEVNULL,
    )
    log.close()  # the child holds its own descriptor
    return Child(name, process, started, log_path)


def python_module(module: str, *args: str) -> list[str]:
    """argv for ``python -m module args`` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def groundedness(*args: str) -> list[str]:
    """argv for the installed ``groundedness`` command (the real console script)."""
    return [str(BIN / "groundedness"), *args]


def cpu_ms_per_item(work: Callable[[Any], object], items: Sequence[Any], passes: int) -> float:
    """Median over ``passes`` of this process's CPU milliseconds per item of ``work``."""
    costs = []
    for _ in range(passes):
        started = time.process_time()
        for item in items:
            work(item)
        costs.append((time.process_time() - started) / len(items) * 1000)
    return median(costs)
