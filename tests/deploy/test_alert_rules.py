"""The chart's alert rules, checked and unit-tested by the real promtool.

The rule groups promtool sees are the chart's own: each test renders the PrometheusRule with
``helm template`` and writes its ``spec.groups`` as the rule file, so the chart and these tests
cannot drift. ``tests/deploy/alert_rules/*.yaml`` are promtool rule unit tests (synthetic series,
the alerts expected at given times, every label and annotation), one file per alert, each with
cases that must fire and cases that must stay quiet.

Needs helm and promtool (``make helm promtool`` put them in ``.cache/bin``); skipped without them.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helm import CHART, NAMESPACE, RELEASE, Values, find_tool, private_env

PROMTOOL_TESTS = Path(__file__).resolve().parent / "alert_rules"
# The promtool tests' series carry the job and namespace (helm.RELEASE, helm.NAMESPACE) this
# release's ServiceMonitor gives.

Manifest = dict[str, Any]

ENABLED: Values = {"minAcceptableScore": 0.5, "prometheusRule": {"enabled": True}}


@dataclass(frozen=True)
class Tools:
    helm: str
    promtool: str
    env: dict[str, str]

    def run(
        self, *command: str, stdin: str | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command,
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            cwd=cwd,
            timeout=300,
            check=False,
        )

    def template(self, values: Values) -> subprocess.CompletedProcess[str]:
        return self.run(
            self.helm,
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--values",
            "-",
            stdin=yaml.safe_dump(values),
        )


@pytest.fixture(scope="session")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Tools:
    helm, promtool = find_tool("helm"), find_tool("promtool")
    if helm is None or promtool is None:
        pytest.skip("helm and promtool are needed (make helm promtool)")
    return Tools(helm=helm, promtool=promtool,
                 env=private_env(tmp_path_factory.mktemp("tool-home")))


def with_rule_values(**rule_values: Any) -> Values:
    return {**ENABLED, "prometheusRule": {"enabled": True, **rule_values}}


def prometheus_rules(tools: Tools, values: Values) -> list[Manifest]:
    result = tools.template(values)
    assert result.returncode == 0, result.stderr
    manifests = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    return [m for m in manifests if m["kind"] == "PrometheusRule"]


def rule_groups(tools: Tools, values: Values) -> list[dict[str, Any]]:
    (rule,) = prometheus_rules(tools, values)
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def alert_names(groups: list[dict[str, Any]]) -> set[str]:
    return {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}


def write_rule_dir(tools: Tools, values: Values, directory: Path) -> Path:
    """Render the chart's rule groups as ``rules.yaml`` next to copies of the promtool tests."""
    directory.mkdir(parents=True, exist_ok=True)
    rules = directory / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups(tools, values)}, sort_keys=False))
    for test_file in PROMTOOL_TESTS.glob("*.yaml"):
        shutil.copy(test_file, directory / test_file.name)
    return directory


def promtool_test(
    tools: Tools, directory: Path, test_file: str
) -> subprocess.CompletedProcess[str]:
    return tools.run(tools.promtool, "test", "rules", test_file, cwd=directory)


def promtool_test_files() -> list[str]:
    return sorted(path.name for path in PROMTOOL_TESTS.glob("*.yaml"))


def alerts_expected_in(test_file: Path) -> tuple[set[str], set[str]]:
    """The alert names a promtool test file expects to fire, and those it expects quiet."""
    spec = yaml.safe_load(test_file.read_text())
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in spec["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    return firing, quiet


def test_no_rule_unless_enabled(tools: Tools) -> None:
    assert prometheus_rules(tools, {"minAcceptableScore": 0.5}) == []


def test_promtool_accepts_the_rendered_rules(tools: Tools, tmp_path: Path) -> None:
    directory = write_rule_dir(tools, ENABLED, tmp_path)
    result = tools.run(
        tools.promtool, "check", "rules", "--lint-fatal", "rules.yaml", cwd=directory
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rule_count = len(alert_names(rule_groups(tools, ENABLED)))
    assert f"SUCCESS: {rule_count} rules found" in result.stdout + result.stderr


def test_every_alert_has_firing_and_quiet_cases() -> None:
    # An alert added to the chart without a promtool test fails here.
    firing: set[str] = set()
    quiet: set[str] = set()
    for name in promtool_test_files():
        fires, stays_quiet = alerts_expected_in(PROMTOOL_TESTS / name)
        assert fires & stays_quiet, f"{name} needs cases that fire and cases that stay quiet"
        firing |= fires
        quiet |= stays_quiet
    assert firing == quiet


def test_the_promtool_tests_cover_the_charts_alerts(tools: Tools) -> None:
    covered: set[str] = set()
    for name in promtool_test_files():
        covered |= alerts_expected_in(PROMTOOL_TESTS / name)[0]
    assert covered == alert_names(rule_groups(tools, ENABLED))


@pytest.mark.parametrize("test_file", promtool_test_files())
def test_alert_fires_when_it_should_and_stays_quiet_otherwise(
    tools: Tools, tmp_path: Path, test_file: str
) -> None:
    result = promtool_test(tools, write_rule_dir(tools, ENABLED, tmp_path), test_file)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "SUCCESS" in output
    assert "FAILED" not in output


@pytest.mark.parametrize(
    ("alerts", "test_file", "alertname"),
    [
        # At 3% the 4% case the tests expect quiet fires.
        ({"judgeErrors": {"threshold": 0.03}}, "judge_errors.yaml", "GroundednessJudgeErrors"),
        # After 1 minute the 1-minute outage the tests expect quiet fires.
        ({"judgeDown": {"for": "1m"}}, "judge_down.yaml", "GroundednessJudgeDown"),
        ({"consumerLagGrowing": {"threshold": 5000}}, "consumer_lag_growing.yaml", None),
        # At 0.4% the 0.5% case fires; after 3 minutes, the 5-minute burst does.
        ({"judgeRateLimited": {"threshold": 0.004}}, "judge_rate_limited.yaml",
         "GroundednessJudgeRateLimited"),
        ({"judgeRateLimited": {"for": "3m"}}, "judge_rate_limited.yaml",
         "GroundednessJudgeRateLimited"),
    ],
)
def test_thresholds_are_the_values(
    tools: Tools, tmp_path: Path, alerts: Values, test_file: str, alertname: str | None
) -> None:
    # The promtool tests are written for the defaults: other values change what fires, so the
    # same tests fail (which also shows a failing promtool test fails this test module). Helm
    # merges the given keys into the chart's defaults.
    directory = write_rule_dir(tools, with_rule_values(alerts=alerts), tmp_path)
    result = promtool_test(tools, directory, test_file)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "FAILED" in output
    if alertname is not None:
        assert alertname in output


def test_labels_annotations_and_turning_an_alert_off(tools: Tools) -> None:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["prometheusRule"]["alerts"]
    values = with_rule_values(
        labels={"release": "kube-prometheus"},
        alertLabels={"team": "evals"},
        alertAnnotations={"runbook_url": "https://runbooks.example/groundedness"},
        alerts={"judgeSpend": {"enabled": False}},
    )
    (rule,) = prometheus_rules(tools, values)
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    alerts = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    assert "GroundednessJudgeSpend" not in {a["alert"] for a in alerts}
    assert len(alerts) == len(defaults) - 1
    for alert in alerts:
        assert alert["labels"]["team"] == "evals"
        assert alert["labels"]["severity"] in {"warning", "critical"}
        assert alert["annotations"]["runbook_url"] == "https://runbooks.example/groundedness"
        assert {"summary", "description"} <= alert["annotations"].keys()


def test_a_custom_series_selector_replaces_the_release_one(tools: Tools) -> None:
    groups = rule_groups(tools, with_rule_values(seriesSelector='cluster="eu",job="gw"'))
    for group in groups:
        for rule in group["rules"]:
            assert 'cluster="eu",job="gw"' in rule["expr"]
            assert f'namespace="{NAMESPACE}"' not in rule["expr"]


@pytest.mark.parametrize(
    ("alerts", "fragment"),
    [
        # A percentage where a share is meant would make the alert never fire.
        ({"judgeErrors": {"threshold": 5}}, "threshold"),
        ({"judgeRateLimited": {"threshold": 1}}, "threshold"),
        ({"judgeDown": {"for": "5 minutes"}}, "for"),
        ({"deadLetters": {"windw": "1h"}}, "windw"),
    ],
)
def test_schema_rejects_bad_alert_values(tools: Tools, alerts: Values, fragment: str) -> None:
    result = tools.template(with_rule_values(alerts=alerts))
    assert result.returncode != 0
    assert fragment in result.stderr
