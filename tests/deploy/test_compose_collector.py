"""The compose file's "spans" profile: its OpenTelemetry Collector writes what the span worker
reads (spans and log records, on two topics created alike), with the same exporter settings as
the repo's own collector (scripts/otelcol), and the real collector accepts its configuration.
Read from the files; no Docker needed."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from consumer.settings import load_settings
from scripts import local_collector
from tests.support.contract import CONTRACT_VARS, WORKER_VARS

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
REPO_CONFIG = REPO / "scripts" / "otelcol" / "config.yaml"
DOCS = REPO / "docs" / "instrumentations.md"
BUILDER = REPO / "scripts" / "otelcol" / "builder.yaml"
COLLECTOR_SCRIPT = REPO / "scripts" / "otel-collector"
CONFIG_NAME = "otel-collector-config"
TOPICS_SERVICE = "spans-topics"
SPAN_SERVICES = ("otel-collector", "worker-spans", TOPICS_SERVICE)

Service = dict[str, Any]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def collector_config(compose: dict[str, Any]) -> dict[str, Any]:
    """The collector configuration the compose file hands to the collector container."""
    config = yaml.safe_load(compose["configs"][CONFIG_NAME]["content"])
    assert isinstance(config, dict)
    return config


@pytest.fixture(scope="module")
def repo_config() -> dict[str, Any]:
    config = yaml.safe_load(REPO_CONFIG.read_text(encoding="utf-8"))
    assert isinstance(config, dict)
    return config


def script_default(name: str) -> str:
    """The default scripts/otel-collector gives ``name`` (``VAR=${NAME:-default}``)."""
    match = re.search(rf"\$\{{{name}:-([^}}]*)\}}", COLLECTOR_SCRIPT.read_text(encoding="utf-8"))
    assert match is not None, name
    return match.group(1)


def test_the_collector_is_the_contrib_image_of_the_builder_release(
    compose: dict[str, Any],
) -> None:
    collector = compose["services"]["otel-collector"]
    image, _, tag = collector["image"].partition(":")
    assert image == "otel/opentelemetry-collector-contrib"
    kafka_exporter = re.search(r"kafkaexporter v(\d+\.\d+)\.\d+", BUILDER.read_text())
    assert kafka_exporter is not None
    assert tag.startswith(kafka_exporter.group(1) + "."), "one collector release for both"
    mounted = {c["source"]: c["target"] for c in collector["configs"]}
    assert mounted == {CONFIG_NAME: "/etc/otelcol-contrib/config.yaml"}  # the image's default
    assert {"127.0.0.1:4317:4317", "127.0.0.1:4318:4318"} <= set(collector["ports"])
    assert collector["depends_on"]["kafka"]["condition"] == "service_healthy"


def test_otlp_comes_in_over_grpc_and_http(collector_config: dict[str, Any]) -> None:
    protocols = collector_config["receivers"]["otlp"]["protocols"]
    # All interfaces of the collector's container: the ports are published on loopback.
    assert protocols["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert protocols["http"]["endpoint"] == "0.0.0.0:4318"


def test_the_exporter_is_the_repo_collectors_with_its_defaults(
    collector_config: dict[str, Any], repo_config: dict[str, Any]
) -> None:
    ours, theirs = collector_config["exporters"]["kafka"], repo_config["exporters"]["kafka"]
    # The worker relies on one trace per record, keyed by trace id, and on the log records
    # keyed the same way (the partition of their spans' number).
    assert ours["partition_traces_by_id"] is True
    assert ours["partition_logs_by_trace_id"] is True
    assert ours["traces"] == {
        "topic": script_default("OTELCOL_TOPIC"), "encoding": script_default("OTELCOL_ENCODING"),
    } == {"topic": "otlp_spans", "encoding": "otlp_proto"}
    assert ours["logs"] == {
        "topic": script_default("OTELCOL_LOGS_TOPIC"),
        "encoding": script_default("OTELCOL_ENCODING"),
    } == {"topic": local_collector.DEFAULT_LOGS_TOPIC, "encoding": "otlp_proto"}
    # One encoding for both topics: the worker decodes the logs as TRACES_FORMAT says.
    assert theirs["logs"]["encoding"] == theirs["traces"]["encoding"]
    # Everything but where it writes: the same settings as the collector the tests exercise.
    where = ("brokers", "traces", "logs")
    assert {k: v for k, v in ours.items() if k not in where} == {
        k: v for k, v in theirs.items() if k not in where}
    assert collector_config["processors"] == repo_config["processors"]
    assert collector_config["service"]["pipelines"] == repo_config["service"]["pipelines"]


def test_the_span_worker_reads_what_the_collector_writes(
    compose: dict[str, Any], collector_config: dict[str, Any]
) -> None:
    worker: Service = compose["services"]["worker-spans"]
    env = {str(k): str(v) for k, v in worker["environment"].items()}
    exporter = collector_config["exporters"]["kafka"]
    assert set(env) <= CONTRACT_VARS, set(env) - CONTRACT_VARS
    assert exporter["brokers"] == [env["KAFKA_BOOTSTRAP_SERVERS"]]
    assert env["TRACES_TOPIC"] == exporter["traces"]["topic"]
    assert env["TRACES_FORMAT"] == exporter["traces"]["encoding"]
    assert env["OTLP_LOGS_TOPIC"] == exporter["logs"]["topic"]
    assert exporter["logs"]["encoding"] == env["TRACES_FORMAT"]
    assert set(collector_config["service"]["pipelines"]) == {"traces", "logs"}
    assert float(env["TRACE_QUIET_SECONDS"]) <= float(env["TRACE_MAX_WAIT_SECONDS"])
    assert int(env["MAX_OPEN_TRACES"]) >= 1
    # Its own group: the trace-event worker's group reads another topic.
    assert env["CONSUMER_GROUP"] != compose["services"]["worker"]["environment"]["CONSUMER_GROUP"]
    assert worker["command"] == ["run"]
    assert worker["read_only"] is True
    assert "otel-collector" in worker["depends_on"]


def test_the_worker_takes_the_span_workers_settings(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its settings as the worker reads them: a logs topic beside OTLP spans, at least once.
    for name in WORKER_VARS:
        monkeypatch.delenv(name, raising=False)
    env = {str(k): str(v) for k, v in compose["services"]["worker-spans"]["environment"].items()}
    for name in ("TRACES_TOPIC", "TRACES_FORMAT", "OTLP_LOGS_TOPIC", "DELIVERY"):
        monkeypatch.setenv(name, env[name])
    settings = load_settings(require_threshold=False)
    assert (settings.traces_topic, settings.otlp_logs_topic, settings.traces_format) == (
        "otlp_spans", "otlp_logs", "otlp_proto")


_CREATED = re.compile(r"--create --if-not-exists --topic (\S+) --partitions (\d+)")


def test_both_topics_are_created_alike_before_anything_writes_them(
    compose: dict[str, Any], collector_config: dict[str, Any],
) -> None:
    # Left to the exporter (or the worker's subscription), each topic would be created when
    # first named, as the broker's default says; the worker refuses different counts.
    services = compose["services"]
    topics = services[TOPICS_SERVICE]
    assert topics["image"] == services["kafka"]["image"]
    assert topics["restart"] == "no"
    assert topics["depends_on"]["kafka"]["condition"] == "service_healthy"
    [script] = topics["command"]
    assert "$" not in script, "compose would substitute it"
    created = dict(_CREATED.findall(" ".join(script.split())))
    exporter = collector_config["exporters"]["kafka"]
    assert set(created) == {exporter["traces"]["topic"], exporter["logs"]["topic"]}
    assert len(set(created.values())) == 1, f"different partition counts: {created}"
    assert script.count("--bootstrap-server kafka:9092") == len(created)
    for name in ("otel-collector", "worker-spans"):
        assert services[name]["depends_on"][TOPICS_SERVICE] == {
            "condition": "service_completed_successfully"}, name


def test_the_span_services_stay_out_of_a_plain_compose_up(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in SPAN_SERVICES:
        assert services[name]["profiles"] == ["spans"], name
    assert all("profiles" not in services[name] for name in ("kafka", "worker", "loader"))


def test_the_repo_collector_refuses_one_topic_for_spans_and_logs() -> None:
    result = subprocess.run(
        [str(COLLECTOR_SCRIPT), "status"], capture_output=True, text=True, timeout=30,
        env={"PATH": "/usr/bin:/bin", "OTELCOL_TOPIC": "spans", "OTELCOL_LOGS_TOPIC": "spans"},
        check=False)
    assert result.returncode == 1
    assert "OTELCOL_LOGS_TOPIC is OTELCOL_TOPIC (spans)" in result.stderr


def test_no_compose_interpolation_in_the_collector_config(compose: dict[str, Any]) -> None:
    # Compose substitutes ${...} and $NAME in a config's content from the host's environment.
    assert "$" not in compose["configs"][CONFIG_NAME]["content"]


def test_the_real_collector_accepts_the_configuration(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    """``otelcol validate`` of the repo's build (the same receiver, processor and exporter
    versions as the image): unknown keys or bad values fail here, not in a container."""
    binary = local_collector.cached_binary()
    if binary is None:
        pytest.skip("no cached collector build (scripts/otel-collector build)")
    config = tmp_path / "config.yaml"
    config.write_text(compose["configs"][CONFIG_NAME]["content"], encoding="utf-8")
    result = subprocess.run([str(binary), "validate", f"--config=file:{config}"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def documented_config() -> dict[str, Any]:
    """The collector configuration docs/instrumentations.md gives teams."""
    section = DOCS.read_text(encoding="utf-8").split("## The collector\n", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    config = yaml.safe_load(block)
    assert isinstance(config, dict)
    return config


def test_the_documented_collector_is_the_compose_one_but_for_the_brokers(
    collector_config: dict[str, Any], documented_config: dict[str, Any],
) -> None:
    # What a team copies is what the compose profile and the tests run.
    ours, theirs = documented_config["exporters"]["kafka"], collector_config["exporters"]["kafka"]
    assert {k: v for k, v in ours.items() if k != "brokers"} == {
        k: v for k, v in theirs.items() if k != "brokers"}
    for part in ("receivers", "processors"):
        assert documented_config[part] == collector_config[part], part
    assert documented_config["service"]["pipelines"] == collector_config["service"]["pipelines"]


def test_the_real_collector_accepts_the_documented_configuration(
    documented_config: dict[str, Any], tmp_path: Path,
) -> None:
    binary = local_collector.cached_binary()
    if binary is None:
        pytest.skip("no cached collector build (scripts/otel-collector build)")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(documented_config), encoding="utf-8")
    result = subprocess.run([str(binary), "validate", f"--config=file:{config}"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
