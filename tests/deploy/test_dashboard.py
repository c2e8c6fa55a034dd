"""The Grafana dashboard: the committed JSON is the generator's, its queries name the worker's
metrics, and the Helm chart ships it to Grafana's sidecar only when asked.

The chart tests need the helm CLI (``scripts/install-helm``); skipped without it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from consumer.ops.metrics import REGISTRY
from scripts.dashboard import DASHBOARD_PATH, SELECTOR, render
from tests.support.helm import CHART, FULLNAME, NAMESPACE, Helm

Panel = dict[str, Any]

# A name directly before a selector (`name{...}`), and any name of the worker's prefix (as in
# `label_values(groundedness_in_flight, namespace)`).
SELECTED = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{")
PREFIXED = re.compile(r"\bgroundedness_[A-Za-z0-9_]*")

# The issue's panels, each by a series it must query.
REQUIRED = {
    "groundedness_verdicts_total",
    "groundedness_judge_latency_seconds_bucket",
    "groundedness_judge_tokens_total",
    "groundedness_judge_cost_usd_total",
    "groundedness_consumer_lag",
    "groundedness_circuit_open",
    "groundedness_dead_letters_total",
    "groundedness_skipped_total",
    "groundedness_open_traces",
    "groundedness_traces_closed_total",
    "groundedness_judge_account_remaining",
    "groundedness_judge_pace_requests_per_minute",
    "groundedness_judge_rate_limited_total",
    "groundedness_judge_calls_total",
    "groundedness_records_redone_total",
    "groundedness_commit_metadata_bytes_bucket",
    "groundedness_commit_metadata_overflow_total",
}


def exposed_series() -> set[str]:
    """The series names the worker's registry serves, by family type (a labelled family with
    no child yet has no sample to read them from)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"),
                "gauge": ("",)}
    return {family.name + suffix for family in REGISTRY.collect()
            for suffix in suffixes[family.type]}


def metric_names(expr: str) -> set[str]:
    return set(SELECTED.findall(expr)) | set(PREFIXED.findall(expr))


def unknown_metrics(queries: list[str]) -> dict[str, set[str]]:
    """Each query naming a series the worker does not expose, with those names."""
    known = exposed_series()
    unknown = {query: metric_names(query) - known for query in queries}
    return {query: names for query, names in unknown.items() if names}


def committed() -> dict[str, Any]:
    board: dict[str, Any] = json.loads(DASHBOARD_PATH.read_text(encoding="utf-8"))
    return board


def panels(board: dict[str, Any]) -> Iterator[Panel]:
    """Every panel but the rows, also those inside a collapsed row."""
    for panel in board["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def panel_queries(board: dict[str, Any]) -> list[str]:
    return [target["expr"] for panel in panels(board) for target in panel["targets"]]


def variable_queries(board: dict[str, Any]) -> list[str]:
    return [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]


# --- the generated JSON ---


def test_committed_dashboard_matches_generator() -> None:
    assert DASHBOARD_PATH.read_text(encoding="utf-8") == render(), (
        f"{DASHBOARD_PATH.name} drifted from scripts/dashboard.py: run `make dashboard`"
    )


def test_every_query_names_a_metric_the_worker_exposes() -> None:
    board = committed()
    queries = panel_queries(board) + variable_queries(board)
    assert all(metric_names(query) for query in queries)
    assert unknown_metrics(queries) == {}


def test_a_renamed_metric_is_reported() -> None:
    # What the test above meets when a metric is renamed in code and not in the dashboard.
    renamed = 'sum(rate(groundedness_verdict_total{verdict="fail"}[5m]))'
    kept = ("histogram_quantile(0.95, sum by (le) "
            "(rate(groundedness_judge_latency_seconds_bucket{}[5m])))")
    assert unknown_metrics([renamed, kept]) == {renamed: {"groundedness_verdict_total"}}
    # A histogram's own name is no series; a counter's is not either (only with _total).
    assert unknown_metrics(["groundedness_judge_latency_seconds", "groundedness_verdicts{}"])


def test_every_panel_the_issue_lists_is_there() -> None:
    queried = set().union(*(metric_names(query) for query in panel_queries(committed())))
    assert queried >= REQUIRED
    latency = [q for q in panel_queries(committed()) if "latency_seconds_bucket" in q]
    assert sorted(re.findall(r"histogram_quantile\((0\.\d+)", " ".join(latency))) == [
        "0.5", "0.95", "0.99"]


def test_every_query_is_scoped_by_the_variables() -> None:
    board = committed()
    names = [variable["name"] for variable in board["templating"]["list"]]
    assert names == ["datasource", "namespace", "job"]
    for panel in panels(board):
        assert panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            # Each series selector of the query, not just one of them.
            selectors = re.findall(r"\{([^}]*)\}", target["expr"])
            assert selectors, target["expr"]
            assert all(s.endswith(SELECTOR) for s in selectors), target["expr"]


def test_panels_do_not_overlap() -> None:
    taken: dict[tuple[int, int], str] = {}
    for panel in committed()["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = panel["title"]
    ids = [panel["id"] for panel in committed()["panels"]]
    assert len(ids) == len(set(ids))


# --- the chart's ConfigMap ---



def dashboard_configmaps(helm: Helm, values: dict[str, Any]) -> list[Panel]:
    result = helm.template({"minAcceptableScore": 0.5, **values})
    assert result.returncode == 0, result.stderr
    manifests = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    return [m for m in manifests
            if m["kind"] == "ConfigMap" and m["metadata"]["name"] == f"{FULLNAME}-dashboard"]


def test_chart_ships_no_dashboard_by_default(helm: Helm) -> None:
    assert dashboard_configmaps(helm, {}) == []
    assert dashboard_configmaps(helm, {"grafanaDashboard": {"enabled": False}}) == []


def test_chart_ships_the_committed_dashboard_to_the_sidecar(helm: Helm) -> None:
    [configmap] = dashboard_configmaps(helm, {"grafanaDashboard": {"enabled": True}})
    metadata = configmap["metadata"]
    assert metadata["labels"]["grafana_dashboard"] == "1"
    assert metadata["namespace"] == NAMESPACE
    assert "annotations" not in metadata
    assert list(configmap["data"]) == ["groundedness-worker.json"]
    assert json.loads(configmap["data"]["groundedness-worker.json"]) == committed()


def test_chart_dashboard_label_namespace_and_annotations(helm: Helm) -> None:
    values = {"grafanaDashboard": {
        "enabled": True, "label": "dashboards.example.com/grafana", "labelValue": "llm",
        "namespace": "monitoring", "annotations": {"grafana_folder": "LLM / Groundedness"},
        "labels": {"team": "evals"},
    }}
    [configmap] = dashboard_configmaps(helm, values)
    metadata = configmap["metadata"]
    assert metadata["namespace"] == "monitoring"
    assert metadata["labels"]["dashboards.example.com/grafana"] == "llm"
    assert metadata["labels"]["team"] == "evals"
    assert "grafana_dashboard" not in metadata["labels"]
    assert metadata["annotations"] == {"grafana_folder": "LLM / Groundedness"}
    result = helm.run("lint", str(CHART), "--strict",
                      values={"minAcceptableScore": 0.5, **values})
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("dashboard", "message"),
    [
        ({"enabled": True, "labelValue": 1}, "at '/grafanaDashboard/labelValue'"),
        ({"enabled": True, "label": "grafana dashboard"}, "at '/grafanaDashboard/label'"),
        ({"enabled": True, "namespace": "Monitoring"}, "at '/grafanaDashboard/namespace'"),
        ({"enabled": True, "folder": "LLM"}, "folder"),
    ],
    ids=["label-value-a-number", "label-with-a-space", "namespace-uppercase", "typo-in-key"],
)
def test_chart_rejects_a_bad_dashboard_value(
    helm: Helm, dashboard: dict[str, Any], message: str
) -> None:
    result = helm.template({"minAcceptableScore": 0.5, "grafanaDashboard": dashboard})
    assert result.returncode != 0
    assert message in result.stderr
