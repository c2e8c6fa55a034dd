"""``make demo FORMAT=...`` without a collector: which way the spans go, and what the user is
told (scripts/demo_spans.py, scripts/local_collector.py); ``make demo INSTRUMENTATION=openai-v2``:
spans without content and their log records, each on its topic, keyed alike; ``make demo``
alone is unchanged. No broker: the records are caught where they would be produced."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from consumer.inputs.formats import FORMATS, SpanFormat
from scripts import demo, demo_spans, local_collector
from scripts.demo_spans import Instrumentation
from scripts.span_transport import Record, SpanEncoding


@pytest.fixture
def no_go(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No go on PATH and an empty collector cache; the cache folder."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("OTELCOL_HOME", str(tmp_path / "otelcol"))
    return tmp_path / "otelcol"


@pytest.fixture
def by_topic(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Record]]:
    """What the direct way writes to Kafka, caught by topic."""
    caught: dict[str, list[Record]] = defaultdict(list)

    async def produce(bootstrap: str, topic: str, records: Sequence[Record]) -> None:
        caught[topic].extend(records)

    monkeypatch.setattr(demo_spans, "produce", produce)
    return caught


@pytest.fixture
def produced(by_topic: dict[str, list[Record]]) -> list[Record]:
    """What the direct way writes to the spans topic, caught."""
    return by_topic["spans"]


def test_without_go_or_a_cached_build_there_is_no_collector(no_go: Path) -> None:
    assert local_collector.unavailable_reason() == (
        "no go to build the collector with, and none cached")
    assert local_collector.cached_binary() is None


def test_a_cached_build_counts_only_once_stamped(no_go: Path) -> None:
    binary = no_go / "bin" / "otelcol-groundedness"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    os.chmod(binary, 0o755)  # noqa: S103 - an executable stand-in
    assert local_collector.cached_binary() is None, "an interrupted build leaves no stamp"
    binary.with_suffix(".stamp").write_text("manifest-hash builder v0.165.0\n")
    assert local_collector.cached_binary() == binary
    assert local_collector.unavailable_reason() is None


def test_auto_without_a_collector_writes_the_records_directly_and_says_so(
    no_go: Path, produced: list[Record]
) -> None:
    said: list[str] = []
    emitted = demo_spans.emit_sample("127.0.0.1:9", "spans", "otlp_json", "auto", said.append)

    assert said == ["no collector (no go to build the collector with, and none cached): "
                    "writing the records directly"]
    assert emitted.way.startswith("directly, no collector")
    assert len(emitted.traffic.answered) == 514
    keys = {record.key.decode() for record in produced}
    assert keys == {t.trace_id for t in emitted.traffic.answered} | set(
        emitted.traffic.other_trace_ids), "every trace on the topic, keyed by its id"
    assert all(record.value.startswith(b"{") for record in produced)


def test_a_collector_that_fails_to_build_falls_back_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, produced: list[Record]
) -> None:
    monkeypatch.setattr(local_collector, "unavailable_reason", lambda: None)

    def build(*, show_progress: bool = False) -> Path:
        raise local_collector.CollectorFailed("otel-collector build failed:\nno network")

    monkeypatch.setattr(local_collector, "build", build)
    said: list[str] = []
    emitted = demo_spans.emit_sample("127.0.0.1:9", "spans", "otlp_proto", "auto", said.append)
    assert said[-1] == "no collector (no network): writing the records directly"
    assert emitted.way.startswith("directly")
    assert produced


def test_insisting_on_the_collector_without_one_stops_with_the_reason(
    no_go: Path, produced: list[Record]
) -> None:
    with pytest.raises(SystemExit, match="no collector: no go"):
        demo_spans.emit_sample("127.0.0.1:9", "spans", "otlp_proto", "collector", print)
    assert produced == []


def test_make_demo_without_format_reads_trace_events_as_before() -> None:
    args = demo.parse_args([])
    assert (args.format, args.via, args.instrumentation) == (
        "trace_json", "auto", "openinference")
    with pytest.raises(SystemExit):
        demo.parse_args(["--format", "otlp_yaml"])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(["--instrumentation", "openai-v2"], ("otlp_proto", "openai-v2"),
                     id="spans-by-default"),
        pytest.param(["--instrumentation", "openai-v2", "--format", "otlp_json"],
                     ("otlp_json", "openai-v2"), id="either-encoding"),
        pytest.param(["--format", "otlp_json"], ("otlp_json", "openinference"),
                     id="openinference-by-default"),
    ],
)
def test_an_instrumentation_makes_spans(argv: list[str], expected: tuple[str, str]) -> None:
    args = demo.parse_args(argv)
    assert (args.format, args.instrumentation) == expected


def test_an_instrumentation_with_trace_events_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        demo.parse_args(["--instrumentation", "openai-v2", "--format", "trace_json"])
    assert "not with --format trace_json" in capsys.readouterr().err


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_openai_v2_without_a_collector_writes_spans_and_log_records_each_to_its_topic(
    no_go: Path, by_topic: dict[str, list[Record]], encoding: SpanEncoding,
) -> None:
    emitted = demo_spans.emit_sample("127.0.0.1:9", "spans", encoding, "direct", print,
                                     instrumentation="openai-v2", logs_topic="logs")

    answered = {t.trace_id for t in emitted.traffic.answered}
    assert len(answered) == 514
    assert set(by_topic) == {"spans", "logs"}
    assert {r.key.decode() for r in by_topic["spans"]} == answered | set(
        emitted.traffic.other_trace_ids)
    # A request's three messages are log records of its chat span, keyed by its trace id as
    # its spans are: the same partition number of each topic. Nothing else logs.
    assert {r.key.decode() for r in by_topic["logs"]} == answered
    assert emitted.logs == 3 * 514
    assert "of log records alike" in emitted.way
    decode = FORMATS[encoding]
    assert isinstance(decode, SpanFormat)
    events = [event for record in by_topic["logs"]
              for event in decode.logs_decoder()(record.value).logs]
    assert len(events) == emitted.logs
    assert all(event.trace_id in answered for event in events)


@pytest.mark.parametrize(
    ("instrumentation", "logs_topic"),
    [pytest.param("openai-v2", None, id="openai-v2-without-a-logs-topic"),
     pytest.param("openinference", "logs", id="a-logs-topic-for-openinference")],
)
def test_a_logs_topic_goes_with_openai_v2_only(
    no_go: Path, by_topic: dict[str, list[Record]], instrumentation: Instrumentation,
    logs_topic: str | None,
) -> None:
    with pytest.raises(ValueError, match="a logs topic goes with openai-v2"):
        demo_spans.emit_sample("127.0.0.1:9", "spans", "otlp_proto", "direct", print,
                               instrumentation=instrumentation, logs_topic=logs_topic)
    assert by_topic == {}


def test_the_collector_is_started_with_the_logs_topic(
    monkeypatch: pytest.MonkeyPatch, by_topic: dict[str, list[Record]],
) -> None:
    started: list[tuple[str, ...]] = []
    monkeypatch.setattr(local_collector, "unavailable_reason", lambda: None)
    monkeypatch.setattr(local_collector, "build", lambda *, show_progress=False: Path("otelcol"))

    @contextmanager
    def running(bootstrap: str, topic: str, encoding: str, logs_topic: str = "otlp_logs",
                ) -> Iterator[local_collector.RunningCollector]:
        started.append((topic, encoding, logs_topic))
        raise local_collector.CollectorFailed("otel-collector start failed:\nport taken")
        yield  # a generator's, never reached

    monkeypatch.setattr(local_collector, "running", running)
    said: list[str] = []
    emitted = demo_spans.emit_sample("127.0.0.1:9", "spans", "otlp_json", "auto", said.append,
                                     instrumentation="openai-v2", logs_topic="logs")
    assert started == [("spans", "otlp_json", "logs")]
    assert said[-1] == "no collector (port taken): writing the records directly"
    assert emitted.logs
    assert by_topic["logs"]
