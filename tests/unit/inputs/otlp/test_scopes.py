"""Batches as a real service exports them: one scope per instrumentation library, often more
than one service per batch, the same service in every record. Whatever the shortcuts of
decoding (only the scopes whose bytes mention GenAI have their spans' keys read; a resource is
converted once while the service sends the same one), what is kept and counted is exact."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue
from opentelemetry.proto.trace.v1.trace_pb2 import ScopeSpans, TracesData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from consumer.inputs import OtlpEncoding
from consumer.inputs.otlp.decode import decode_otlp
from consumer.inputs.otlp.span_filter import scopes_may_keep
from consumer.inputs.otlp.values import MAX_DEPTH
from tests.support.otel_spans import KIND, Recorder, otlp_json, otlp_proto

ENCODINGS: list[OtlpEncoding] = ["otlp_proto", "otlp_json"]


def encoded(spans: Sequence[ReadableSpan], encoding: OtlpEncoding) -> bytes:
    proto = otlp_proto(spans)
    return proto if encoding == "otlp_proto" else otlp_json(proto)


def service_request(recorder: Recorder, url: str = "/orders/7") -> list[ReadableSpan]:
    """One request through five instrumentation libraries: an HTTP server root, an HTTP client
    call, an OpenInference chain with a database call and an OTel GenAI chat call under it.
    The SDK batches them a scope per library, in the order their first span ended: HTTP
    client, database, GenAI client, OpenInference, HTTP server."""
    server = recorder.provider.get_tracer("opentelemetry.instrumentation.fastapi")
    http = recorder.provider.get_tracer("opentelemetry.instrumentation.httpx")
    framework = recorder.provider.get_tracer("openinference.instrumentation.llama_index")
    database = recorder.provider.get_tracer("opentelemetry.instrumentation.asyncpg")
    client = recorder.provider.get_tracer("opentelemetry.instrumentation.openai_v2")
    with server.start_as_current_span("POST /ask", kind=SpanKind.SERVER) as root:
        root.set_attribute("url.path", url)
        with http.start_as_current_span("GET", kind=SpanKind.CLIENT) as call:
            call.set_attribute("url.full", "https://auth.internal/check")
        with framework.start_as_current_span("query") as chain:
            chain.set_attribute(KIND, "CHAIN")
            with database.start_as_current_span("SELECT orders", kind=SpanKind.CLIENT) as db:
                db.set_attribute("db.query.text", "SELECT 1")
            with client.start_as_current_span("chat gpt-4o") as chat:
                chat.set_attribute("gen_ai.operation.name", "chat")
    return recorder.spans()


def scopes_of(value: bytes) -> list[str]:
    return [scope.scope.name for resource in TracesData.FromString(value).resource_spans
            for scope in resource.scope_spans]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_genai_spans_are_kept_from_whichever_scope_holds_them(encoding: OtlpEncoding) -> None:
    spans = service_request(Recorder())
    assert [name.rpartition(".")[2] for name in scopes_of(otlp_proto(spans))] == [
        "httpx", "asyncpg", "openai_v2", "llama_index", "fastapi"
    ]
    decoded = decode_otlp(encoded(spans, encoding), encoding)
    assert sorted(span.name for span in decoded.kept) == ["chat gpt-4o", "query"]
    (trace_id,) = {span.trace_id for span in decoded.kept}
    assert (decoded.dropped, decoded.invalid) == (3, 0)
    assert decoded.spans_per_trace == {trace_id: 5}
    assert decoded.roots_seen == {trace_id}


def test_genai_words_in_values_only_keep_nothing() -> None:
    """The byte search finds "gen_ai." in a URL: the span's keys decide, and drop it."""
    recorder = Recorder()
    server = recorder.provider.get_tracer("opentelemetry.instrumentation.fastapi")
    with server.start_as_current_span("GET", kind=SpanKind.SERVER) as root:
        root.set_attribute("url.path", "/docs/gen_ai.operation.name/langfuse.trace")
        root.add_event("cache miss", {"key": "openinference.span.kind"})
    decoded = decode_otlp(otlp_proto(recorder.spans()), "otlp_proto")
    assert (decoded.kept, decoded.dropped, len(decoded.roots_seen)) == ([], 1, 1)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_each_service_in_a_batch_gives_its_spans_its_own_resource(
    encoding: OtlpEncoding,
) -> None:
    shop, search = Recorder("shop-api"), Recorder("search-api")
    batch = encoded(service_request(shop) + service_request(search), encoding)
    kept = decode_otlp(batch, encoding).kept
    services: dict[str, set[str]] = {span.name: set() for span in kept}
    for span in kept:
        services[span.name].add(span.resource["service.name"])
    assert services == {"query": {"shop-api", "search-api"},
                        "chat gpt-4o": {"shop-api", "search-api"}}
    assert len({span.trace_id for span in kept}) == 2


def test_records_of_services_taking_turns_each_carry_their_own_resource() -> None:
    shop, search = Recorder("shop-api"), Recorder("search-api")
    for recorder, service in ((shop, "shop-api"), (search, "search-api"), (shop, "shop-api")):
        kept = decode_otlp(otlp_proto(service_request(recorder)), "otlp_proto").kept
        assert {span.resource["service.name"] for span in kept} == {service}


def test_a_resource_cut_to_its_bounds_is_counted_in_every_record() -> None:
    recorder = Recorder()
    data = TracesData.FromString(otlp_proto(service_request(recorder)))
    nested = AnyValue(string_value="leaf")
    for _ in range(MAX_DEPTH + 2):
        nested = AnyValue(array_value=ArrayValue(values=[nested]))
    data.resource_spans[0].resource.attributes.add(key="deep").value.CopyFrom(nested)
    value = bytes(data.SerializeToString())
    for _ in range(3):  # the same service, record after record
        decoded = decode_otlp(value, "otlp_proto")
        assert len(decoded.kept) == 2
        assert decoded.cut_values == 1


def test_a_bad_span_in_one_scope_leaves_the_genai_spans_of_the_others() -> None:
    """protobuf refuses the batch (invalid UTF-8 in the database span); read span by span,
    the chain and the chat call in their own scopes are still found and kept."""
    value = otlp_proto(service_request(Recorder()))
    corrupted = value.replace(b"SELECT 1", b"SELECT \xff")  # same length
    assert corrupted != value
    decoded = decode_otlp(corrupted, "otlp_proto")
    assert sorted(span.name for span in decoded.kept) == ["chat gpt-4o", "query"]
    assert (decoded.dropped, decoded.invalid) == (3, 1)


def test_scopes_not_as_sent_are_searched_as_they_are() -> None:
    """A ``TracesData`` that does not line up with the bytes (here an extra scope in front):
    its own scopes are searched, not the bytes' scopes at the wrong places."""
    value = otlp_proto(service_request(Recorder()))
    data = TracesData.FromString(value)
    names = scopes_of(value)
    resource = data.resource_spans[0]
    scopes = [ScopeSpans(), *resource.scope_spans]
    del resource.scope_spans[:]
    resource.scope_spans.extend(scopes)
    genai = ["openinference" in name or "openai" in name for name in names]
    assert scopes_may_keep(value, data) == [False, *genai]
    assert scopes_may_keep(value, TracesData.FromString(value)) == genai

