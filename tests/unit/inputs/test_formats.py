"""The input formats' registry: the one list the settings, ``check`` and the pipeline read."""

from __future__ import annotations

import json
from typing import get_args

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from consumer.cli import _parser
from consumer.errors import ConfigError
from consumer.inputs import FormatName, OtlpEncoding
from consumer.inputs.formats import FORMATS, EventFormat, SpanFormat, file_formats, input_format
from consumer.settings import load_settings
from schemas.trace import TraceEvent


def test_the_registry_is_the_settings_literal() -> None:
    names = tuple(name for arg in get_args(FormatName)
                  for name in (get_args(arg) or (arg,)))
    assert tuple(FORMATS) == names
    spans = {name for name, fmt in FORMATS.items() if isinstance(fmt, SpanFormat)}
    assert spans == set(get_args(OtlpEncoding))


@pytest.mark.parametrize("name", list(FORMATS))
def test_traces_format_takes_every_registered_name(name: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACES_FORMAT", name.upper())
    assert load_settings(require_threshold=False).traces_format == name


def test_traces_format_refuses_another_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACES_FORMAT", "otlp_protobuf")
    with pytest.raises(ConfigError, match="TRACES_FORMAT: Input should be 'trace_json'"):
        load_settings(require_threshold=False)


def test_check_offers_the_formats_read_from_files() -> None:
    for name in ("auto", *file_formats()):
        assert _parser().parse_args(["check", "f.jsonl", "--format", name]).file_format == name
    assert "otlp_proto" not in file_formats(), "binary protobuf: not a file check reads"
    with pytest.raises(SystemExit):
        _parser().parse_args(["check", "f.jsonl", "--format", "otlp_proto"])


def test_each_decoder_reads_its_format() -> None:
    event = input_format("trace_json").decoder()(
        json.dumps({"trace_id": "t-1", "input": "q", "output": "a",
                    "retrieved_documents": [{"content": "d"}]}).encode())
    assert isinstance(event, TraceEvent)
    assert event.trace_id == "t-1"
    empty = TracesData()
    span = empty.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, b"\x02" * 8, "chat"
    span.attributes.add(key="gen_ai.operation.name").value.string_value = "chat"
    for name, value in (("otlp_proto", empty.SerializeToString()),
                        ("otlp_json", json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{
                            "traceId": "01" * 16, "spanId": "02" * 8, "name": "chat",
                            "attributes": [{"key": "gen_ai.operation.name",
                                            "value": {"stringValue": "chat"}}]}]}]}]}).encode())):
        decoded = input_format(name).decoder()(value)
        assert not isinstance(decoded, TraceEvent)
        assert decoded.spans_per_trace == {"01" * 16: 1}, name


def test_every_event_decoder_lives_in_inputs() -> None:
    # The decoder is named by a string, which the layers test cannot follow: a decoder in a
    # higher layer would import upward.
    for fmt in FORMATS.values():
        if isinstance(fmt, EventFormat):
            assert fmt.decode.startswith("consumer.inputs."), fmt
