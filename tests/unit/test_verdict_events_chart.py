"""The chart's ``verdictEvents`` values: off, the worker gets no event variable at all; on, it
gets ``VERDICT_EVENTS=otlp`` and the OTel SDK's own endpoint and service variables, and a
value the worker would refuse fails at render, not at the pod's start."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from consumer.settings import load_settings
from tests.support.helm import Helm, Values, find_tool, private_env

ENDPOINT = "http://otel-collector.observability:4318"
EVENT_VARIABLES = {"VERDICT_EVENTS", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"}


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    binary = find_tool("helm")
    if binary is None:
        pytest.skip("helm is not installed (run scripts/install-helm, or put helm on PATH)")
    return Helm(binary=binary, env=private_env(tmp_path_factory.mktemp("helm-home")))


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
