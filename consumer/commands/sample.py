"""The bundled labelled sample (Factcheck-GPT, Apache-2.0; see data/README.md) as traces."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from consumer.jsonl import numbered_lines, read_text
from consumer.settings import Settings
from consumer.worker import create_producer

SAMPLE_PATH = Path(__file__).parents[1] / "data" / "factcheck-gpt-sample.jsonl"


def read_labelled(path: Path = SAMPLE_PATH) -> Iterator[dict[str, Any]]:
    """Rows of a labelled JSON-lines file (``input``, ``documents``, ``output``, ``label``)."""
    for _, line in numbered_lines(read_text(path)):
        yield json.loads(line)


def as_trace(row: dict[str, Any]) -> dict[str, Any]:
    """A labelled row as a trace event; the label rides in metadata for later agreement."""
    return {
        "trace_id": str(row["id"]),
        "input": row.get("input"),
        "output": row.get("output"),
        "retrieved_documents": row.get("documents") or [],
        "metadata": {"label": row.get("label"), "source": row.get("source")},
    }


def sample_traces(limit: int | None = None) -> list[dict[str, Any]]:
    """The bundled sample as trace events."""
    traces = [as_trace(row) for row in read_labelled()]
    return traces[:limit] if limit is not None else traces


async def load_sample(settings: Settings, topic: str, limit: int | None = None) -> int:
    """Produce the sample traces to ``topic``, keyed by trace id; returns how many."""
    producer = create_producer(settings)
    await producer.start()
    try:
        traces = sample_traces(limit)
        for trace in traces:
            await producer.send(
                topic, json.dumps(trace).encode("utf-8"), key=trace["trace_id"].encode("utf-8")
            )
        await producer.flush()
    finally:
        await producer.stop()
    return len(traces)
