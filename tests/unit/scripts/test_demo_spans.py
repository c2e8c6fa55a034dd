"""``make demo FORMAT=...`` without a collector: which way the spans go, and what the user is
told (scripts/demo_spans.py, scripts/local_collector.py); ``make demo`` alone is unchanged.
No broker: the records are caught where they would be produced."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from scripts import demo, demo_spans, local_collector
from scripts.span_transport import Record


@pytest.fixture
def no_go(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No go on PATH and an empty collector cache; the cache folder."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("OTELCOL_HOME", str(tmp_path / "otelcol"))
    return tmp_path / "otelcol"


@pytest.fixture
def produced(monkeypatch: pytest.MonkeyPatch) -> list[Record]:
    """What the direct way writes to Kafka, caught."""
    caught: list[Record] = []

    async def produce(bootstrap: str, topic: str, records: Sequence[Record]) -> None:
        caught.extend(records)

    monkeypatch.setattr(demo_spans, "produce", produce)
    return caught


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
    assert (args.format, args.via) == ("trace_json", "auto")
    with pytest.raises(SystemExit):
        demo.parse_args(["--format", "otlp_yaml"])
