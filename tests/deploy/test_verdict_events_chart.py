"""The chart's ``verdictEvents`` values: off, the worker gets no event variable at all; on, it
gets ``VERDICT_EVENTS=otlp`` and the OTel SDK's own endpoint and service variables, and a
value the worker would refuse fails at render, not at the pod's start."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from consumer.settings import load_settings
from tests.support.helm import Helm, Values

ENDPOINT = "http://otel-collector.observability:4318"
EVENT_VARIABLES = {"VERDICT_EVENTS", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"}



def config(helm: Helm, values: Values) -> dict[str, str]:
    result = helm.template({"minAcceptableScore": 0.5, **values})
    assert result.returncode == 0, result.stderr
    maps: list[dict[str, Any]] = [doc for doc in yaml.safe_load_all(result.stdout)
                                  if doc and doc["kind"] == "ConfigMap"]
    data: dict[str, str] = maps[0]["data"]
    return data


def test_off_by_default_and_when_none(helm: Helm) -> None:
    assert EVENT_VARIABLES.isdisjoint(config(helm, {}))
    assert EVENT_VARIABLES.isdisjoint(config(helm, {"verdictEvents": {"exporter": "none",
                                                                      "otlpEndpoint": ENDPOINT}}))


def test_on_the_worker_and_the_sdk_read_what_the_chart_renders(
    helm: Helm, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = config(helm, {"verdictEvents": {"exporter": "otlp", "otlpEndpoint": ENDPOINT,
                                           "serviceName": "evals-prod"}})
    assert {key: data[key] for key in EVENT_VARIABLES} == {
        "VERDICT_EVENTS": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT,
        "OTEL_SERVICE_NAME": "evals-prod"}
    for name, value in data.items():
        monkeypatch.setenv(name, value)
    assert load_settings().verdict_events == "otlp"


def test_on_without_an_endpoint_leaves_the_sdks_default(helm: Helm) -> None:
    data = config(helm, {"verdictEvents": {"exporter": "otlp"}})
    assert data["VERDICT_EVENTS"] == "otlp"
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in data
    assert "OTEL_SERVICE_NAME" not in data


@pytest.mark.parametrize(
    "events",
    [
        pytest.param({"exporter": "jaeger"}, id="unknown-exporter"),
        pytest.param({"exporter": "otlp", "otlpEndpoint": "otel-collector:4318"},
                     id="endpoint-without-scheme"),
        pytest.param({"exporter": "otlp", "endpoint": ENDPOINT}, id="misspelt-key"),
    ],
)
def test_a_value_the_worker_would_refuse_fails_at_render(helm: Helm, events: Values) -> None:
    result = helm.template({"minAcceptableScore": 0.5, "verdictEvents": events})
    assert result.returncode != 0
    assert "verdictEvents" in result.stderr


@pytest.mark.parametrize(
    ("grace", "events", "renders"),
    [
        pytest.param(60, "otlp", True, id="defaults-leave-room"),
        pytest.param(50, "none", True, id="off-the-drain-is-enough"),
        pytest.param(50, "otlp", False, id="on-no-room-for-the-events"),
        pytest.param(56, "otlp", False, id="on-exactly-drain-plus-11"),
        pytest.param(57, "otlp", True, id="on-room-for-producer-and-events"),
    ],
)
def test_with_events_on_the_grace_period_covers_their_close_after_the_drain(
    helm: Helm, grace: int, events: str, renders: bool,
) -> None:
    """The drain (45 s), then the producer's stop (5 s) and the events' close (5 s + 1 s):
    a grace period Kubernetes ends before them kills the pod with events unsent."""
    result = helm.template({"minAcceptableScore": 0.5, "drainSeconds": 45,
                            "terminationGracePeriodSeconds": grace,
                            "verdictEvents": {"exporter": events}})
    assert (result.returncode == 0) == renders, result.stderr
    if not renders:
        assert "verdictEvents.exporter otlp" in result.stderr
        assert f"terminationGracePeriodSeconds ({grace})" in result.stderr
