"""Verdicts as OpenTelemetry evaluation events, end to end: the real worker
(``VERDICT_EVENTS=otlp``, configured only by ``OTEL_EXPORTER_OTLP_ENDPOINT`` and
``OTEL_SERVICE_NAME``) -> the OTel SDK's OTLP/HTTP exporter -> the real OpenTelemetry
Collector's logs pipeline -> its Kafka exporter -> read back, every event matched to the verdict
it reports (ids, rule, label, score, reason, claims, model); in both input formats.

And the exporter's endpoint down or silent: every verdict is still published and every offset
committed, and the events that could not go are counted in
``groundedness_verdict_events_dropped_total``. Skipped only where the collector can be neither
built (no ``go``) nor found cached.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.sdk.trace import ReadableSpan

from consumer.localjudge.server import JudgeServer
from consumer.ops import metrics
from tests.support import collector
from tests.support.fake_judge import ScriptedJudge
from tests.support.otel_spans import Recorder, otlp_proto, rag_trace
from tests.support.ports import free_port
from tests.support.streams import Topics, create_topics, in_process_worker, produce, read_all
from tests.support.workers import WorkerPool, wait_committed, worker_env

pytestmark = pytest.mark.integration

RULES = "groundedness,missing_citation"  # two verdicts, two events, per trace
SERVICE = "groundedness-under-test"
DOCS = [{"id": "doc-1", "content": "The Eiffel Tower was completed in 1889."}]


def otel_id(n: int, width: int) -> str:
    return f"{n + 1:0{width}x}"


def trace_json_stream() -> tuple[list[bytes], list[bytes | None]]:
    """Traces with OTel ids and an answer span, one of each id case without both, and
    outcomes of every kind: pass, fail (with claims), error, a missing citation."""
    events: list[dict[str, Any]] = []
    for n, output in enumerate([
        "It was completed in 1889 [1].",
        "It was completed in 1925. [[score=1]]",
        "Completed in 1889, painted red. [[score=3]]",
        "It was completed in 1889. [[status=400]]",
    ]):
        events.append({"trace_id": otel_id(n, 32), "span_id": otel_id(n, 16), "output": output,
                       "retrieved_documents": DOCS})
    events.append({"trace_id": "rag-support-017", "span_id": otel_id(9, 16),
                   "output": "In 1889 [1].", "retrieved_documents": DOCS})
    events.append({"trace_id": otel_id(10, 32), "output": "In 1889 [1].",
                   "retrieved_documents": DOCS})
    return [json.dumps(event).encode() for event in events], [None] * len(events)


def span_stream() -> tuple[list[bytes], list[bytes | None]]:
    """RAG traces as the real SDK records them, one per record keyed by its trace id."""
    values: list[bytes] = []
    keys: list[bytes | None] = []
    for n in range(4):
        recorder = Recorder(service="rag-api")
        rag_trace(recorder.tracer, f"Question {n}?")
        spans: list[ReadableSpan] = recorder.spans()
        context = spans[0].context
        assert context is not None
        values.append(otlp_proto(spans))
        keys.append(f"{context.trace_id:032x}".encode())
    return values, keys


@pytest.fixture
def logs_collector(kafka: str, tmp_path: Path) -> Iterator[collector.LogsCollector]:
    collector.available()
    with collector.running_logs(kafka, f"verdict-events-{time.time_ns()}", tmp_path) as running:
        yield running


@pytest.mark.parametrize("traces_format", ["trace_json", "otlp_proto"])
async def test_every_event_reaches_the_collector_and_matches_its_verdict(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    logs_collector: collector.LogsCollector, traces_format: str,
) -> None:
    _, server = fake_judge
    topics = Topics.fresh(f"events-{traces_format}")
    await create_topics(kafka, topics)
    values, keys = trace_json_stream() if traces_format == "trace_json" else span_stream()
    await produce(kafka, topics.traces, values, keys=keys)
    env = worker_env(topics.env(kafka), server.url, RULES=RULES, TRACES_FORMAT=traces_format,
                     TRACE_QUIET_SECONDS="0.5", VERDICT_EVENTS="otlp",
                     OTEL_EXPORTER_OTLP_ENDPOINT=logs_collector.endpoint,
                     OTEL_SERVICE_NAME=SERVICE)
    dropped_before = dropped()

    async with in_process_worker(env, monkeypatch):
        records = await read_all(kafka, topics.verdicts, at_least=2 * len(values), timeout_s=60,
                                 settle_s=1.0)
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 30)
    verdicts = [json.loads(record.value or b"") for record in records]
    events = await collector.read_logs(kafka, logs_collector.topic, expected=len(verdicts))

    assert len(verdicts) == 2 * len(values)
    assert committed == ends
    by_id = {attributes(event)["groundedness.verdict_id"]: event for event in events}
    assert len(events) == len(by_id) == len(verdicts), "one event per verdict, no more"
    for verdict in verdicts:
        event = by_id[verdict["verdict_id"]]
        assert_matches(event, verdict)
    labels = {v["verdict"] for v in verdicts}
    print(f"\n{traces_format}: {len(verdicts)} verdicts ({sorted(labels)}) -> "
          f"{len(events)} events through the collector")
    if traces_format == "trace_json":
        assert labels == {"pass", "fail", "error"}
        placed = [v for v in verdicts if has_otel_ids(v)]
        assert len(placed) == 8, "the 4 traces with both OTel ids, under both rules"
    assert dropped() == dropped_before


def assert_matches(event: LogRecord, verdict: dict[str, Any]) -> None:
    """The event says what its verdict says, on the verdict's trace and answer span."""
    got = attributes(event)
    assert event.event_name == "gen_ai.evaluation.result"
    assert got["gen_ai.evaluation.name"] == verdict["rule"]
    assert got["gen_ai.evaluation.score.label"] == verdict["verdict"]
    assert got.get("gen_ai.evaluation.score.value") == verdict["score"]
    error = verdict["error"]
    reason = verdict["reason"] if error is None else f"{error['type']}: {error['message']}"
    assert got.get("gen_ai.evaluation.explanation") == reason
    assert got.get("error.type") == (None if error is None else error["type"])
    assert got["groundedness.trace_id"] == verdict["trace_id"]
    assert got["groundedness.prompt_version"] == verdict["prompt_version"]
    assert got.get("groundedness.judge_model") == verdict["judge_model"]
    assert got.get("groundedness.unsupported_claims", []) == verdict["unsupported_claims"]
    if has_otel_ids(verdict):
        assert (event.trace_id.hex(), event.span_id.hex()) == (verdict["trace_id"],
                                                               verdict["span_id"])
    else:
        assert (event.trace_id, event.span_id) == (b"", b"")


def has_otel_ids(verdict: dict[str, Any]) -> bool:
    return len(verdict["trace_id"]) == 32 and bool(verdict.get("span_id"))


def attributes(event: LogRecord) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in event.attributes}


def value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(item) for item in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


@pytest.mark.parametrize("endpoint", ["closed", "silent"])
async def test_an_endpoint_down_or_silent_loses_events_counted_and_never_a_verdict(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    endpoint: str,
) -> None:
    _, server = fake_judge
    topics = Topics.fresh(f"events-{endpoint}")
    await create_topics(kafka, topics)
    count = 60
    await produce(kafka, topics.traces, [json.dumps({
        "trace_id": otel_id(n, 32), "span_id": otel_id(n, 16), "output": f"Answer {n}.",
    }).encode() for n in range(count)])
    with socket.socket() as silent:
        # Silent: the kernel completes each connection into the backlog; nothing ever answers,
        # so every export waits out its timeout. Closed: nothing listens, connections refused.
        silent.bind(("127.0.0.1", 0))
        silent.listen(128)
        port = silent.getsockname()[1] if endpoint == "silent" else free_port()
        env = worker_env(topics.env(kafka), server.url, VERDICT_EVENTS="otlp",
                         OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
                         OTEL_EXPORTER_OTLP_TIMEOUT="2")
        before = dropped()
        async with in_process_worker(env, monkeypatch):
            records = await read_all(kafka, topics.verdicts, at_least=count, timeout_s=60,
                                     settle_s=0.5)
            committed, ends = await wait_committed(kafka, topics.group, topics.traces, 30)
        # Every event is counted by the time the worker stops, but for a batch whose request
        # was still waiting on the silent endpoint: counted when its timeout ends it.
        lost = await dropped_since(before, count, timeout_s=30)

    assert len({json.loads(r.value or b"")["verdict_id"] for r in records}) == count
    assert committed == ends, "no commit waited for the events"
    print(f"\n{endpoint} endpoint: {count} verdicts published and committed, "
          f"{lost:.0f} events dropped and counted")
    assert lost == count


OTLP_KEY = "otlp-api-key-0123456789abcdef"


@pytest.mark.parametrize("headers", [
    f'authorization="Bearer {OTLP_KEY}"',  # quoted, as compose and helm files often write it
    f"x-api-key={OTLP_KEY[:12]},{OTLP_KEY[12:]}",  # a key with a comma: the SDK splits it
])
async def test_otlp_headers_the_sdk_refuses_never_reach_the_log(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path, headers: str,
) -> None:
    """The SDK logs a header part it cannot parse, whole (``Header format invalid! ...``),
    through the worker's own handler: the key in it is redacted, in every line it writes."""
    _, server = fake_judge
    topics = Topics.fresh("events-headers")
    await create_topics(kafka, topics, partitions=1)
    await produce(kafka, topics.traces, [json.dumps({
        "trace_id": otel_id(0, 32), "span_id": otel_id(0, 16), "output": "Answer.",
    }).encode()])
    env = worker_env(topics.env(kafka), server.url, VERDICT_EVENTS="otlp",
                     OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{free_port()}",
                     OTEL_EXPORTER_OTLP_TIMEOUT="2", OTEL_EXPORTER_OTLP_HEADERS=headers)
    async with WorkerPool(tmp_path) as pool:
        worker = await pool.start(env)
        assert await read_all(kafka, topics.verdicts, at_least=1, timeout_s=60, settle_s=0.5)
        assert await worker.terminate() == 0
        output = worker.log()
    assert "Header format invalid" in output, "the SDK's warning is the case under test"
    assert "[REDACTED]" in output
    for fragment in (OTLP_KEY, OTLP_KEY[:12], OTLP_KEY[12:]):
        assert fragment not in output


def dropped() -> float:
    value = metrics.REGISTRY.get_sample_value("groundedness_verdict_events_dropped_total")
    assert value is not None
    return value


async def dropped_since(before: float, expected: int, timeout_s: float) -> float:
    """Events dropped since ``before``, once they reach ``expected`` (or time is up)."""
    deadline = time.monotonic() + timeout_s
    while dropped() - before < expected and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.1)  # a counter another thread moves: polled, there is no event
    return dropped() - before
