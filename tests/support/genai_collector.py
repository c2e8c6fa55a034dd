"""The real OpenTelemetry Collector as a team runs it for GenAI telemetry: traces AND logs over
OTLP/HTTP in, each into its own Kafka topic, both keyed by trace id (``partition_traces_by_id``,
``partition_logs_by_trace_id``) so that a trace's spans and its log records land on the same
partition number of two topics of the same partition count: what the worker's
``OTLP_LOGS_TOPIC`` reads. And the two topics read back, record by record.

The keys are contrib kafkaexporter v0.165.1's (``scripts/otelcol/builder.yaml``): top-level
``partition_traces_by_id`` / ``partition_logs_by_trace_id`` (the record key is the trace id in
32 hex digits, for logs once per trace id: the exporter splits a batch by trace), and
``traces::`` / ``logs::`` ``topic`` and ``encoding``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord

from scripts import local_collector
from scripts.kafka import broker
from tests.support.collector import running_config


@dataclass(frozen=True, slots=True)
class GenAITopics:
    """The two topics the collector writes, created with the same partition count."""

    traces: str
    logs: str


@dataclass(frozen=True, slots=True)
class GenAICollector:
    """A started collector: its OTLP/HTTP endpoint (``/v1/traces``, ``/v1/logs`` under it)."""

    endpoint: str  # http://127.0.0.1:PORT, as OTEL_EXPORTER_OTLP_ENDPOINT has it
    topics: GenAITopics


async def create_topics(bootstrap: str, topics: GenAITopics, partitions: int) -> None:
    """Both topics with ``partitions`` each, before the first record (the exporter would
    otherwise auto-create them with the broker's default count)."""
    await broker.create_topics(bootstrap, {topics.traces: partitions, topics.logs: partitions})


def genai_config(port: int, bootstrap: str, topics: GenAITopics,
                 encoding: str = "otlp_proto") -> dict[str, Any]:
    """The collector's configuration: OTLP/HTTP in, batched, traces and logs pipelines into one
    kafka exporter, both partitioned by trace id, acknowledged by every in-sync replica."""
    return {
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{port}"}}}},
        "processors": {"batch": {"timeout": "200ms"}},
        "exporters": {"kafka": {
            "brokers": bootstrap.split(","),
            "traces": {"topic": topics.traces, "encoding": encoding},
            "logs": {"topic": topics.logs, "encoding": encoding},
            "partition_traces_by_id": True,
            "partition_logs_by_trace_id": True,
            "producer": {"required_acks": -1},
        }},
        "service": {
            # No internal metrics server: it would take port 8888 from another collector.
            "telemetry": {"metrics": {"level": "none"}},
            "pipelines": {
                "traces": {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["kafka"]},
                "logs": {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["kafka"]},
            },
        },
    }


@contextmanager
def running(bootstrap: str, topics: GenAITopics, run_dir: Path) -> Iterator[GenAICollector]:
    """The repo's collector binary with ``genai_config`` on a free port; stopped with SIGTERM
    on exit (its exporter flushes to Kafka first). Its log is ``run_dir / "otelcol.log"``."""
    port = local_collector.free_port()
    with running_config(genai_config(port, bootstrap, topics), port, run_dir) as endpoint:
        yield GenAICollector(endpoint, topics)


async def read_records(bootstrap: str, topic: str, *, enough: int, timeout_s: float = 60.0,
                       settle_s: float = 1.0) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of ``topic`` from the start, once ``enough`` are there and ``settle_s`` more
    seconds brought no other (the exporter may split a batch into more records than asked)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    records: list[ConsumerRecord[bytes, bytes]] = []
    try:
        deadline = time.monotonic() + timeout_s
        quiet_until = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            for part in batch.values():
                records.extend(part)
            if any(batch.values()):
                quiet_until = time.monotonic() + settle_s
            elif len(records) >= enough and time.monotonic() >= quiet_until:
                break
    finally:
        await consumer.stop()
    return records
