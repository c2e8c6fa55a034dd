"""How each system under test starts: the worker, the baselines, and the benchmark judge."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from benchmarks.kafka import delete_topics
from benchmarks.procs import Child, groundedness, python_module, spawn
from scripts.kafka.broker import create_topics

WORKER = "worker"
SEQUENTIAL = "sequential"
BATCH_GATHER = "batch-gather"
BARE = "bare"
READ = "read"  # consume and commit only: the span benchmarks' yardstick
CEILING = "ceiling"  # the worker's unavoidable span parts alone (``ceiling_loop.py``)
SYSTEMS = (WORKER, BATCH_GATHER, SEQUENTIAL)

# Variables a developer's shell may hold that would change what is measured.
_SCRUBBED = (
    "JUDGE_REQUESTS_PER_MINUTE", "JUDGE_TOKENS_PER_MINUTE", "JUDGE_MAX_CONCURRENCY",
    "JUDGE_TIMEOUT_SECONDS", "LOG_LEVEL", "LOG_FORMAT", "DELIVERY", "CONTEXT_FIELD",
    "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID",
    "TRACES_FORMAT", "TRACE_QUIET_SECONDS", "TRACE_MAX_WAIT_SECONDS", "MAX_OPEN_TRACES",
)


@dataclass
class Bench:
    """One harness run: the broker, a unique tag, where logs go, the topics to clean up."""

    bootstrap: str
    tag: str
    log_dir: Path
    topics: list[str] = field(default_factory=list)
    _serial: int = 0

    def name(self, what: str) -> str:
        """A unique topic or group name for this harness run."""
        self._serial += 1
        return f"bench-{self.tag}-{what}-{self._serial}"

    async def topic(
        self, what: str, partitions: int = 1, config: Mapping[str, str] | None = None
    ) -> str:
        """Create a fresh topic (deleted at the end of the harness run), with ``config``
        (e.g. ``message.timestamp.type``) if given."""
        name = self.name(what)
        if config:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            await admin.start()
            try:
                await admin.create_topics([NewTopic(name, num_partitions=partitions,
                                                    replication_factor=1,
                                                    topic_configs=dict(config))])
            finally:
                await admin.close()
        else:
            await create_topics(self.bootstrap, {name: partitions})
        self.topics.append(name)
        return name

    async def cleanup(self) -> None:
        """Delete every topic this run created."""
        await delete_topics(self.bootstrap, self.topics)
        self.topics.clear()


@dataclass
class Judge:
    """A running benchmark judge."""

    child: Child
    port: int

    @property
    def url(self) -> str:
        """Base URL for the openai client."""
        return f"http://127.0.0.1:{self.port}/v1"

    async def stats(self, arrivals: bool = False) -> dict[str, Any]:
        """Counts (and arrival times) recorded by the judge."""
        path = "/stats/arrivals" if arrivals else "/stats"
        url = f"http://127.0.0.1:{self.port}{path}"

        def fetch() -> dict[str, Any]:
            with urllib.request.urlopen(url, timeout=10) as response:
                return dict(json.loads(response.read()))

        return await asyncio.to_thread(fetch)

    async def stop(self) -> None:
        """Stop the judge process."""
        await self.child.stop(grace_s=5)


async def start_judge(
    bench: Bench, latency_s: float, server: str = "asyncio", jitter: float = 0.0
) -> Judge:
    """Start ``benchmarks.judge`` in its own process and wait for its port."""
    argv = python_module("benchmarks.judge", "--latency", str(latency_s), "--server", server,
                         "--jitter", str(jitter))
    child = spawn(bench.name(f"judge-{server}"), argv, dict(os.environ), bench.log_dir,
                  stdout=subprocess.PIPE)
    assert child.process.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(child.process.stdout.readline), 30)
    if not line.startswith(b"port "):
        await child.stop()
        raise RuntimeError(f"the benchmark judge did not start: {child.log_tail()}")
    return Judge(child, int(line.split()[1]))


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One system on one traces topic, writing to one verdicts topic."""

    system: str
    traces_topic: str
    verdicts_topic: str
    dlq_topic: str
    group: str
    judge_url: str
    concurrency: int = 64
    timeout_s: float = 30.0
    requests_per_minute: int | None = None
    log_level: str = "info"
    profile_to: Path | None = None  # the worker under cProfile (.prof) or pyinstrument
    env: Mapping[str, str] = field(default_factory=dict)  # more settings (TRACES_FORMAT, ...)


def start_system(bench: Bench, spec: RunSpec) -> Child:
    """Spawn the worker (the real ``groundedness run``) or a baseline loop."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env |= {
        "KAFKA_BOOTSTRAP_SERVERS": bench.bootstrap,
        "TRACES_TOPIC": spec.traces_topic,
        "VERDICTS_TOPIC": spec.verdicts_topic,
        "DLQ_TOPIC": spec.dlq_topic,
        "CONSUMER_GROUP": spec.group,
        "OPENAI_API_KEY": "bench-key",
        "OPENAI_BASE_URL": spec.judge_url,
        "JUDGE_MODEL": "bench-judge",
        "JUDGE_TIMEOUT_SECONDS": f"{spec.timeout_s:g}",
        "JUDGE_MAX_CONCURRENCY": str(spec.concurrency),
        "BATCH_SIZE": str(spec.concurrency),
        "MIN_ACCEPTABLE_SCORE": "0.75",
        # The bench repeats a sample's texts: reused answers would not measure the judge path.
        "JUDGE_CACHE_SIZE": "0",
        "HEALTH_PORT": "0",
        "LOG_LEVEL": spec.log_level,
        "LOG_FORMAT": "json",
    }
    env |= spec.env
    if spec.requests_per_minute:
        env["JUDGE_REQUESTS_PER_MINUTE"] = str(spec.requests_per_minute)
    if spec.system == CEILING:
        argv = python_module("benchmarks.ceiling_loop")
    elif spec.system != WORKER:
        argv = python_module("benchmarks.baselines", spec.system)
    elif spec.profile_to is not None and spec.profile_to.suffix == ".prof":
        argv = python_module("cProfile", "-o", str(spec.profile_to), "-m", "consumer.cli", "run")
    elif spec.profile_to is not None:
        renderer = "html" if spec.profile_to.suffix == ".html" else "text"
        argv = python_module("pyinstrument", "-r", renderer, "-o", str(spec.profile_to),
                             "-m", "consumer.cli", "run")
    else:
        argv = groundedness("run")
    return spawn(bench.name(spec.system), argv, env, bench.log_dir)
