"""``groundedness load-sample``: the bundled sample as traces, and a refusal that leaves
nothing behind when no broker answers."""

from __future__ import annotations

import gc
import logging

import pytest

from consumer.errors import ConfigError
from consumer.load_sample import load_sample, sample_traces
from consumer.settings import load_settings
from tests.support.ports import free_port


def test_the_sample_becomes_traces_with_their_labels() -> None:
    traces = sample_traces(limit=3)
    assert len(traces) == 3
    assert [t["trace_id"] for t in traces] == sorted({t["trace_id"] for t in traces})
    assert all(t["output"] and t["retrieved_documents"] for t in traces)
    assert {t["metadata"]["label"] for t in sample_traces()} == {"grounded", "ungrounded"}


async def test_no_broker_is_one_config_error_and_the_producer_is_closed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", f"127.0.0.1:{free_port()}")  # nobody listens
    settings = load_settings(require_threshold=False)
    with caplog.at_level(logging.ERROR), pytest.raises(ConfigError, match="cannot reach"):
        await load_sample(settings, "traces", limit=1)
    gc.collect()  # an unclosed producer says so when it is collected
    assert not [r for r in caplog.records if "Unclosed" in r.getMessage()]
