"""docker-compose.yml, Dockerfile and .dockerignore, checked by reading them (no Docker needed)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from consumer import wiring
from consumer.rules.registry import KNOWN_RULES, parse_rules
from consumer.settings import load_settings
from tests.support.contract import CONTRACT_VARS

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
TMP_MOUNT = "/tmp"  # noqa: S108 - the container's tmpfs, not a host path

APP_SERVICES = ("local-judge", "worker", "loader")
KRAFT_SETTINGS = (
    "KAFKA_NODE_ID",
    "KAFKA_PROCESS_ROLES",
    "KAFKA_LISTENERS",
    "KAFKA_ADVERTISED_LISTENERS",
    "KAFKA_CONTROLLER_LISTENER_NAMES",
    "KAFKA_CONTROLLER_QUORUM_VOTERS",
    "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
)

Service = dict[str, Any]
Instruction = tuple[str, str]


@pytest.fixture(scope="module")
def services() -> dict[str, Service]:
    compose = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(compose, dict)
    found: dict[str, Service] = compose["services"]
    return found


def environment(service: Service) -> dict[str, str]:
    """A service's environment, given as a mapping or as a list of NAME=value."""
    env = service.get("environment", {})
    if isinstance(env, list):
        pairs = [item.split("=", 1) for item in env]
        return {pair[0]: pair[1] if len(pair) > 1 else "" for pair in pairs}
    return {str(name): str(value) for name, value in env.items()}


def dockerfile_instructions() -> list[Instruction]:
    """(INSTRUCTION, arguments) pairs: comments dropped, continuation lines joined."""
    logical: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "dangling line continuation"
    result: list[Instruction] = []
    for line in logical:
        keyword, _, arguments = line.partition(" ")
        result.append((keyword.upper(), arguments.strip()))
    return result


def final_stage() -> list[Instruction]:
    instructions = dockerfile_instructions()
    starts = [i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM"]
    return instructions[starts[-1] :]


def test_services_exist(services: dict[str, Service]) -> None:
    assert {"kafka", "local-judge", "worker", "loader"} <= set(services)


def test_kafka_is_single_node_kraft_with_healthcheck(services: dict[str, Service]) -> None:
    kafka = services["kafka"]
    assert kafka["image"] == "apache/kafka:4.1.1"
    env = environment(kafka)
    for setting in KRAFT_SETTINGS:
        assert env.get(setting), setting
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert "CONTROLLER" in env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{env['KAFKA_NODE_ID']}@")
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "1"
    assert kafka["healthcheck"]["test"]


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_services_are_built_read_only(services: dict[str, Service], name: str) -> None:
    service = services[name]
    assert service["build"]["context"] == "."
    assert service.get("dockerfile", service["build"].get("dockerfile", "Dockerfile")) == (
        "Dockerfile"
    )
    assert service["read_only"] is True
    assert TMP_MOUNT in service["tmpfs"]
    assert set(environment(service)) <= CONTRACT_VARS


def test_worker(services: dict[str, Service]) -> None:
    worker = services["worker"]
    assert worker["command"] == ["run"]
    env = environment(worker)
    assert set(env) <= CONTRACT_VARS, set(env) - CONTRACT_VARS
    assert env["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert env["OPENAI_BASE_URL"] == "http://local-judge:8000/v1"
    # Any key does for the local judge, but the worker redacts it wherever it appears: one
    # found inside other values (a host name, a model name) would mangle their log lines.
    key = env["OPENAI_API_KEY"]
    others = [str(value) for name, value in env.items() if name != "OPENAI_API_KEY"]
    assert key
    assert not any(key in value for value in [*others, "local-heuristic"])
    assert 0 <= float(env["MIN_ACCEPTABLE_SCORE"]) <= 1
    assert worker["read_only"] is True
    assert worker["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert "local-judge" in worker["depends_on"]
    # Docker's default 10 s would kill the worker in the middle of its drain.
    grace = re.fullmatch(r"(\d+)s", worker["stop_grace_period"])
    assert grace is not None
    assert int(grace.group(1)) > 45


@pytest.mark.parametrize("name", ["worker", "worker-spans"])
def test_the_workers_take_their_rules_from_the_host(
    services: dict[str, Service], name: str
) -> None:
    # `RULES=missing_citation docker compose up` changes the rules; unset, compose's default.
    env = environment(services[name])
    default = re.fullmatch(r"\$\{RULES:-([^}]*)\}", env["RULES"])
    assert default is not None, env["RULES"]
    assert parse_rules(default.group(1)) == ("groundedness",)
    # Unset or empty: missing_citation's default markers.
    assert env["CITATION_PATTERN"] == "${CITATION_PATTERN:-}"


COST_DEFAULTS = {"SAMPLE_RATE": "1.0", "TRACE_FILTER": "", "JUDGE_CACHE_SIZE": "10000",
                 "JUDGE_PRICE_INPUT_PER_MILLION": "", "JUDGE_PRICE_OUTPUT_PER_MILLION": "",
                 "JUDGE_BUDGET_USD_PER_DAY": "", "JUDGE_PRICE_CACHED_INPUT_PER_MILLION": "",
                 "METRICS_MAX_PROJECTS": "20",
                 **{f"{rule}_{control}": "" for rule in (
                     "GROUNDEDNESS", "MISSING_CITATION", "ANSWERED_WITHOUT_TOOL")
                    for control in ("SAMPLE_RATE", "FILTER")}}


@pytest.mark.parametrize("name", ["worker", "worker-spans"])
def test_the_workers_take_their_cost_controls_from_the_host(
    services: dict[str, Service], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # `SAMPLE_RATE=0.3 docker compose up` samples; unset, compose's defaults, which the worker
    # must read as its own (an empty price is no price, not a refusal to start).
    env = environment(services[name])
    defaults = {}
    for variable in COST_DEFAULTS:
        passed = re.fullmatch(rf"\$\{{{variable}:-([^}}]*)\}}", env[variable])
        assert passed is not None, env[variable]
        defaults[variable] = passed.group(1)
    assert defaults == COST_DEFAULTS
    for variable, value in defaults.items():
        monkeypatch.setenv(variable, value)
    settings = load_settings(require_threshold=False)
    assert (settings.sample_rate, settings.trace_filter, settings.judge_cache_size) == (
        1.0, None, 10_000)
    assert {rule: settings.selection(rule).rate for rule in KNOWN_RULES} == dict.fromkeys(
        KNOWN_RULES, 1.0), "an empty per-rule variable is unset"
    assert wiring.prices(settings) is None


def test_local_judge(services: dict[str, Service]) -> None:
    assert services["local-judge"]["command"] == [
        "local-judge",
        "--host",
        "0.0.0.0",  # noqa: S104 - listens inside its container
        "--port",
        "8000",
    ]


def test_loader_runs_once(services: dict[str, Service]) -> None:
    loader = services["loader"]
    assert loader["command"] == ["load-sample"]
    assert loader["restart"] == "no"
    assert loader["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert environment(loader)["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"


def test_dockerfile_is_multi_stage() -> None:
    bases = [args for keyword, args in dockerfile_instructions() if keyword == "FROM"]
    assert len(bases) >= 2
    assert all(base.split()[0] == "python:3.11-slim" for base in bases)
    stage = final_stage()
    copies = [args for keyword, args in stage if keyword == "COPY"]
    assert copies
    assert all(args.startswith("--from=") for args in copies)


def test_dockerfile_runs_as_non_root() -> None:
    users = [args for keyword, args in final_stage() if keyword == "USER"]
    assert users
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    assert user == "10001"


def test_dockerfile_entrypoint_and_runtime_settings() -> None:
    stage = final_stage()
    last = {keyword: args for keyword, args in stage}
    assert json.loads(last["ENTRYPOINT"]) == ["groundedness"]
    assert json.loads(last["CMD"]) == ["run"]
    assert last["STOPSIGNAL"] == "SIGTERM"
    assert "8080" in last["EXPOSE"].split()
    env = " ".join(args for keyword, args in stage if keyword == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env.split()
    assert "PYTHONUNBUFFERED=1" in env.split()


def test_dockerignore_keeps_the_context_small() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    # Allow-list: everything excluded, then the build inputs re-included.
    assert patterns[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!consumer/", "!schemas/"} <= set(patterns)
    assert not any(p.startswith("!") and (".venv" in p or ".git" in p) for p in patterns)
