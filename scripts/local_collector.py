"""The repo's OpenTelemetry Collector (``scripts/otel-collector``) from Python: can it run
here, build it, start it on a port and topic of its own, stop it.

The collector is built once with Go (minutes on a cold module cache) and cached; where there
is neither Go nor a cached binary, ``unavailable_reason`` says so and callers go without it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

OTEL_COLLECTOR = Path(__file__).resolve().parent / "otel-collector"
DEFAULT_HOME = OTEL_COLLECTOR.parent.parent / ".cache" / "otelcol"
BUILD_TIMEOUT_S = 1200.0  # a first build downloads the modules and compiles: minutes
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


DEFAULT_LOGS_TOPIC = "otlp_logs"  # the script's default, and the Kafka exporter's own


@dataclass(frozen=True, slots=True)
class RunningCollector:
    """A started collector: where OTLP/HTTP goes in, and where its spans and logs land."""

    endpoint: str  # http://127.0.0.1:PORT
    topic: str
    encoding: str  # otlp_proto | otlp_json, of both topics
    logs_topic: str = DEFAULT_LOGS_TOPIC

    @property
    def traces_url(self) -> str:
        """The OTLP/HTTP traces path, as the SDK's ``OTLPSpanExporter(endpoint=...)`` wants it."""
        return f"{self.endpoint}/v1/traces"

    @property
    def logs_url(self) -> str:
        """The OTLP/HTTP logs path, as the SDK's ``OTLPLogExporter(endpoint=...)`` wants it."""
        return f"{self.endpoint}/v1/logs"


class CollectorFailed(RuntimeError):
    """The collector script failed to build or start; the message carries its stderr."""


def unavailable_reason() -> str | None:
    """Why the collector can be neither built nor found cached here; None when it can."""
    if shutil.which("go") is not None or cached_binary() is not None:
        return None
    return "no go to build the collector with, and none cached"


def cached_binary() -> Path | None:
    """A collector the script built before (stamped when its build completed), or None."""
    home = Path(os.environ.get("OTELCOL_HOME", DEFAULT_HOME))
    for stamp in sorted((home / "bin").glob("*.stamp")):
        binary = stamp.with_suffix("")
        if os.access(binary, os.X_OK):
            return binary
    return None


def build(*, show_progress: bool = False) -> Path:
    """Build the collector, or find it cached; its binary's path. ``show_progress`` lets the
    script's progress through to this process's stderr (a first build takes minutes)."""
    result = _run("build", {}, timeout_s=BUILD_TIMEOUT_S, show_progress=show_progress)
    if result.returncode != 0:
        raise CollectorFailed(f"otel-collector build failed:\n{(result.stderr or '').strip()}")
    return Path(result.stdout.strip().splitlines()[-1])


@contextmanager
def running(bootstrap: str, topic: str, encoding: str,
            logs_topic: str = DEFAULT_LOGS_TOPIC) -> Iterator[RunningCollector]:
    """A collector on a free port writing spans to ``topic`` and log records to
    ``logs_topic``, both in ``encoding`` and keyed by trace id; stopped on exit (SIGTERM: its
    exporter flushes to Kafka first)."""
    env = {
        "OTELCOL_HTTP_PORT": str(free_port()),
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "OTELCOL_TOPIC": topic,
        "OTELCOL_LOGS_TOPIC": logs_topic,
        "OTELCOL_ENCODING": encoding,
    }
    try:
        started = _run("start", env, timeout_s=BUILD_TIMEOUT_S + START_TIMEOUT_S)
        if started.returncode != 0:
            raise CollectorFailed(f"otel-collector start failed:\n{started.stderr.strip()}")
        yield RunningCollector(started.stdout.strip().splitlines()[-1], topic, encoding,
                               logs_topic)
    finally:
        _run("stop", env, timeout_s=STOP_TIMEOUT_S)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _run(command: str, env: dict[str, str], *, timeout_s: float, show_progress: bool = False
         ) -> subprocess.CompletedProcess[str]:
    # stdout is the script's answer (a path, an endpoint); stderr its progress.
    return subprocess.run(
        [str(OTEL_COLLECTOR), command], env={**os.environ, **env}, stdout=subprocess.PIPE,
        stderr=None if show_progress else subprocess.PIPE, text=True, timeout=timeout_s,
        check=False,
    )
