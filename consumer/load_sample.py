"""The bundled labelled sample (Factcheck-GPT, Apache-2.0; see data/README.md) as traces."""

from __future__ import annotations

import json
from typing import Any

from consumer import wiring
from consumer.jsonl import read_labelled
from consumer.kafka import compat as aiokafka_compat
from consumer.settings import Settings


def sample_traces(limit: int | None = None) -> list[dict[str, Any]]:
    """The bundled sample as trace events."""
    traces = [row.as_trace() for row in read_labelled()]
    return traces[:limit] if limit is not None else traces


async def load_sample(settings: Settings, topic: str, limit: int | None = None) -> int:
    """Produce the sample traces to ``topic``, keyed by trace id; returns how many."""
    aiokafka_compat.install()
    producer = wiring.create_producer(settings)
    try:  # from before the start: a producer that failed to start is closed too
        await wiring.start(producer, settings, "producer")
        traces = sample_traces(limit)
        for trace in traces:
            await producer.send(
                topic, json.dumps(trace).encode("utf-8"), key=trace["trace_id"].encode("utf-8")
            )
        await producer.flush()
    finally:
        await producer.stop()
    return len(traces)
