"""The real OpenTelemetry Collector between the OTel Python SDK and the real broker.

``scripts/otel-collector`` builds the collector (core OTLP receiver, batch processor, contrib
``kafkaexporter``) and runs it with ``partition_traces_by_id: true``. The SDK's own
``OTLPSpanExporter`` sends two traces over OTLP/HTTP, one shaped as an instrumented RAG
application emits it (HTTP root, CHAIN, RETRIEVER with documents, LLM with OpenInference
attributes, a database span); the test reads the topic back and decodes each record with the
``opentelemetry-proto`` classes (``otlp_proto``) or as OTLP JSON (``otlp_json``): every span
arrived, one trace per record keyed by its hex trace id, attributes intact.
Skipped only where the collector can be neither built (no ``go``) nor found cached.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import ConsumerRecord
from openinference.semconv.trace import DocumentAttributes, SpanAttributes
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
from opentelemetry.sdk.trace import ReadableSpan

from scripts import local_collector
from scripts.kafka import broker
from tests.support import collector

pytestmark = pytest.mark.integration

ENCODINGS = ["otlp_proto", "otlp_json"]
KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
DOCS = SpanAttributes.RETRIEVAL_DOCUMENTS
PARTITIONS = 3


@dataclass(frozen=True)
class ArrivedSpan:
    """A span as read back from one Kafka record, ids in lowercase hex."""

    record_key: str
    partition: int
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: int
    attributes: dict[str, Any]
    resource: dict[str, Any]


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def collector_build() -> None:
    """The collector binary, built once per session (minutes on a cold Go module cache)."""
    collector.available()


@pytest.fixture(scope="session", params=ENCODINGS)
def running(
    request: pytest.FixtureRequest, kafka: str, collector_build: None
) -> Iterator[local_collector.RunningCollector]:
    """A collector per encoding, on a port and topic of its own, stopped afterwards."""
    encoding: str = request.param
    topic = f"otlp-spans-{encoding}-{uuid.uuid4().hex[:8]}"
    with local_collector.running(kafka, topic, encoding) as started:
        yield started


@pytest.fixture(scope="session")
async def delivered(
    running: local_collector.RunningCollector, kafka: str
) -> tuple[list[ReadableSpan], list[ArrivedSpan]]:
    """The spans the SDK sent through the collector, and the spans read back from Kafka."""
    # Three partitions, so that keying by trace id has something to decide; created before
    # the first span rather than left to auto-creation, which races the reader's metadata.
    await broker.create_topics(kafka, {running.topic: PARTITIONS})
    sent = await asyncio.to_thread(collector.emit_rag_traces, running.traces_url)
    records = await collector.read_spans(kafka, running.topic, expected=len(sent))
    arrived = [span for record in records for span in _decode(record, running.encoding)]
    return sent, arrived


# ---------------------------------------------------------------------------- tests


async def test_every_span_arrives_once(
    delivered: tuple[list[ReadableSpan], list[ArrivedSpan]],
) -> None:
    sent, arrived = delivered
    assert sorted(_hex_span_id(s) for s in sent) == sorted(a.span_id for a in arrived)
    assert len({_hex_trace_id(s) for s in sent}) == 2


async def test_records_hold_one_trace_keyed_by_its_hex_id(
    delivered: tuple[list[ReadableSpan], list[ArrivedSpan]],
) -> None:
    _, arrived = delivered
    for span in arrived:
        assert len(span.record_key) == 32
        int(span.record_key, 16)  # hex, or ValueError
        assert span.record_key == span.trace_id
    partitions: dict[str, set[int]] = {}
    for span in arrived:
        partitions.setdefault(span.trace_id, set()).add(span.partition)
    assert all(len(used) == 1 for used in partitions.values()), partitions


async def test_ids_and_parents_survive(
    delivered: tuple[list[ReadableSpan], list[ArrivedSpan]],
) -> None:
    sent, arrived = delivered
    by_id = {a.span_id: a for a in arrived}
    for span in sent:
        got = by_id[_hex_span_id(span)]
        assert got.trace_id == _hex_trace_id(span)
        expected_parent = format(span.parent.span_id, "016x") if span.parent else None
        assert got.parent_span_id == expected_parent
        assert got.name == span.name
        # OTLP's SpanKind is the SDK's enum value plus one (0 is UNSPECIFIED on the wire).
        assert got.kind == span.kind.value + 1


async def test_attributes_survive(
    delivered: tuple[list[ReadableSpan], list[ArrivedSpan]],
) -> None:
    sent, arrived = delivered
    by_id = {a.span_id: a for a in arrived}
    for span in sent:
        got = by_id[_hex_span_id(span)]
        assert got.attributes == _plain(span.attributes or {}), span.name
        assert got.resource["service.name"] == collector.SERVICE_NAME
    retriever = next(a for a in arrived if a.attributes.get(KIND) == "RETRIEVER")
    assert retriever.attributes[f"{DOCS}.1.{DocumentAttributes.DOCUMENT_SCORE}"] == 0.42
    llm = next(a for a in arrived if a.attributes.get(KIND) == "LLM")
    assert llm.attributes[SpanAttributes.LLM_TOKEN_COUNT_PROMPT] == 812


async def test_records_are_in_the_configured_encoding(
    running: local_collector.RunningCollector, kafka: str,
    delivered: tuple[list[ReadableSpan], list[ArrivedSpan]],
) -> None:
    records = await collector.read_spans(kafka, running.topic, expected=len(delivered[0]))
    if running.encoding == "otlp_proto":
        for record in records:
            assert not (record.value or b"").startswith(b"{")
            assert TracesData.FromString(record.value or b"").resource_spans
        return
    spans = [
        span
        for record in records
        for rs in json.loads(record.value or b"")["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]
    for span in spans:
        # OTLP JSON: hex ids (not proto3 JSON's base64), integer enums, 64-bit integers as
        # strings.
        assert len(span["traceId"]) == 32
        assert span["traceId"] == span["traceId"].lower()
        int(span["traceId"], 16)
        assert len(span["spanId"]) == 16
        assert isinstance(span["kind"], int)
        assert isinstance(span["startTimeUnixNano"], str)
    tokens = next(
        a["value"] for s in spans for a in s["attributes"]
        if a["key"] == SpanAttributes.LLM_TOKEN_COUNT_PROMPT
    )
    assert tokens == {"intValue": "812"}


# ---------------------------------------------------------------------------- reading


def _decode(record: ConsumerRecord[bytes, bytes], encoding: str) -> list[ArrivedSpan]:
    """The spans of one record, whose key must be set."""
    assert record.key is not None, "partition_traces_by_id sets every record's key"
    key = (record.key.decode(), record.partition)
    value = record.value or b""
    if encoding == "otlp_proto":
        return _from_proto(key, TracesData.FromString(value))
    return _from_json(key, json.loads(value))


def _from_proto(key: tuple[str, int], data: TracesData) -> list[ArrivedSpan]:
    return [
        ArrivedSpan(
            *key, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex() or None,
            span.name, span.kind,
            {kv.key: _proto_value(kv.value) for kv in span.attributes},
            {kv.key: _proto_value(kv.value) for kv in rs.resource.attributes},
        )
        for rs in data.resource_spans for ss in rs.scope_spans for span in ss.spans
    ]


def _from_json(key: tuple[str, int], data: Mapping[str, Any]) -> list[ArrivedSpan]:
    return [
        ArrivedSpan(
            *key, span["traceId"], span["spanId"], span.get("parentSpanId") or None,
            span["name"], span["kind"],
            {kv["key"]: _json_value(kv["value"]) for kv in span.get("attributes", [])},
            {kv["key"]: _json_value(kv["value"]) for kv in rs["resource"]["attributes"]},
        )
        for rs in data["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]
    ]


def _proto_value(value: AnyValue) -> Any:
    """An OTLP protobuf AnyValue as a plain value; arrays as tuples, as the SDK keeps them."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_proto_value(v) for v in value.array_value.values)
    return getattr(value, kind) if kind else None


def _json_value(value: Mapping[str, Any]) -> Any:
    """An OTLP JSON AnyValue as a plain value; arrays as tuples, as the SDK keeps them."""
    (kind, inner), = value.items()
    if kind == "intValue":
        return int(inner)  # 64-bit integers travel as strings
    if kind == "arrayValue":
        return tuple(_json_value(v) for v in inner.get("values", []))
    if kind == "bytesValue":
        return base64.b64decode(inner)
    return inner


def _plain(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, list | tuple) else v for k, v in attributes.items()}


def _hex_trace_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.trace_id, "032x")


def _hex_span_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.span_id, "016x")
