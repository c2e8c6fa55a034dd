"""The Helm chart in helm/groundedness-worker: lint, render, and check the rendered objects.

Needs the helm CLI (``scripts/install-helm`` puts it in ``.cache/bin``); skipped without it.
No cluster and no network: only ``helm lint`` and ``helm template``.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from consumer.errors import ConfigError
from consumer.inputs.formats import FORMATS
from consumer.rules.registry import KNOWN_RULES
from consumer.settings import load_settings
from tests.support.contract import OTEL_SDK_VARS, WORKER_VARS
from tests.support.helm import (
    CHART,
    FULLNAME,
    NAMESPACE,
    Helm,
    Values,
    iter_strings,
)

TMP_MOUNT = "/tmp"  # noqa: S108 - the container's writable emptyDir, not a host path

SECRET_VARS = frozenset({"OPENAI_API_KEY", "KAFKA_SASL_PASSWORD", "KAFKA_SSL_KEY_PASSWORD",
                         "KAFKA_SASL_OAUTH_CLIENT_SECRET"})
ALWAYS_CONFIGURED = frozenset(
    {
        "KAFKA_BOOTSTRAP_SERVERS",
        "TRACES_TOPIC",
        "VERDICTS_TOPIC",
        "DLQ_TOPIC",
        "CONSUMER_GROUP",
        "DELIVERY",
        "JUDGE_MODEL",
        "JUDGE_TIMEOUT_SECONDS",
        "JUDGE_MAX_CONCURRENCY",
        "RULES",
        "SAMPLE_RATE",
        "JUDGE_CACHE_SIZE",
        "MAX_DOCUMENTS",
        "MAX_DOCUMENT_CHARS",
        "MAX_OUTPUT_CHARS",
        "CONTEXT_FIELD",
        "HEALTH_PORT",
        "LOG_LEVEL",
        "LOG_FORMAT",
        "KAFKA_SECURITY_PROTOCOL",
        "DRAIN_TIMEOUT_SECONDS",
    }
)
INTEGER_VARS = frozenset(
    {
        "JUDGE_MAX_CONCURRENCY",
        "JUDGE_REQUESTS_PER_MINUTE",
        "JUDGE_TOKENS_PER_MINUTE",
        "JUDGE_CACHE_SIZE",
        "MAX_DOCUMENTS",
        "MAX_DOCUMENT_CHARS",
        "MAX_OUTPUT_CHARS",
        "HEALTH_PORT",
        "DRAIN_TIMEOUT_SECONDS",
    }
)

Manifest = dict[str, Any]

SASL_TLS_KEDA: Values = {
    "minAcceptableScore": 0.7,
    "existingSecret": "gw-creds",
    "secretKeys": {"openaiApiKey": "openai-key", "kafkaSaslPassword": "kafka-pass"},
    "kafka": {
        "bootstrapServers": "b1.kafka:9096,b2.kafka:9096",
        "tracesTopic": "prod-llm-traces",
        "consumerGroup": "gw-prod",
        "securityProtocol": "SASL_SSL",
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": "groundedness"},
        "tls": {"caSecret": "kafka-ca", "caKey": "ca.pem"},
    },
    "keda": {
        "enabled": True,
        "partitionCount": 12,
        "minReplicas": 1,
        "maxReplicas": 12,
        "lagThreshold": 250,
        "activationLagThreshold": 5,
        "offsetResetPolicy": "latest",
    },
}

# A filter with every kind of quote JMESPath uses: it must reach the worker as written.
FILTER = ("metadata.environment == 'production' && service != \"canary\" "
          "&& length(retrieved_documents || `[]`) > `0`")

# Values combinations that must lint and render.
VALID_CASES: dict[str, Values] = {
    "defaults": {"minAcceptableScore": 0.5},
    "existing-secret": {
        "minAcceptableScore": 0.5,
        "existingSecret": "gw-creds",
        "secretKeys": {"openaiApiKey": "openai-key"},
    },
    "chart-secret-sasl-plain": {
        "minAcceptableScore": 0.5,
        "secrets": {"openaiApiKey": "sk-test-123", "kafkaSaslPassword": "hunter2"},
        "kafka": {
            "securityProtocol": "SASL_PLAINTEXT",
            "sasl": {"mechanism": "PLAIN", "username": "gw"},
        },
    },
    "sasl-tls-keda": SASL_TLS_KEDA,
    "tls-configmap-ca-keda": {
        "minAcceptableScore": 0.5,
        "kafka": {"securityProtocol": "SSL", "tls": {"caConfigMap": "kafka-ca-bundle"}},
        "keda": {"enabled": True, "partitionCount": 6, "maxReplicas": 6},
    },
    "keda-plaintext": {
        "minAcceptableScore": 0.5,
        "keda": {"enabled": True, "partitionCount": 3, "maxReplicas": 3, "minReplicas": 0},
    },
    "hpa": {
        "minAcceptableScore": 0.5,
        "autoscaling": {
            "enabled": True,
            "minReplicas": 2,
            "maxReplicas": 5,
            "targetCPUUtilizationPercentage": 65,
        },
    },
    "service-monitor": {
        "minAcceptableScore": 0.5,
        "serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "prom"}},
    },
    "judge-options": {
        # A decimal passed with `helm --set` arrives as a string: accepted too.
        "minAcceptableScore": "0.75",
        "judge": {
            "baseUrl": "http://local-judge:8000/v1",
            "model": "judge-large",
            "requestsPerMinute": 600,
            "tokensPerMinute": 2000000,
            "timeoutSeconds": 12.5,
        },
        "evaluation": {"contextField": "input", "maxDocumentChars": 1500000},
        "healthPort": 9090,
        "drainSeconds": 100,
        "terminationGracePeriodSeconds": 130,
        "logging": {"level": "debug", "format": "console"},
    },
    "score-zero": {"minAcceptableScore": 0},
    # Every rule, and missing_citation's own markers (a backslash and a CJK bracket to quote).
    "all-rules": {
        "minAcceptableScore": 0.5,
        "rules": ["groundedness", "missing_citation", "answered_without_tool"],
        "citationPattern": r"\[\d+\]|【\d+】",
    },
    # Every cost control; decimals as `helm --set` passes them (strings).
    "cost-controls": {
        "minAcceptableScore": 0.5,
        "cost": {"sampleRate": "0.3", "traceFilter": FILTER, "judgeCacheSize": 500,
                 "prices": {"inputPerMillion": "0.15", "outputPerMillion": 0.6,
                            "cachedInputPerMillion": "0.075"},
                 "budgetUsdPerDay": "25"},
    },
    # Per rule: a sample rate (0 is one), a filter, both.
    "per-rule": {
        "minAcceptableScore": 0.5,
        "rules": ["groundedness", "missing_citation", "answered_without_tool"],
        "cost": {"sampleRate": 1, "judgeCacheSize": 10,
                 "rules": {"groundedness": {"sampleRate": "0.1",
                                            "filter": "service == 'support-bot'"},
                           "missing_citation": {"sampleRate": 0, "filter": FILTER},
                           "answered_without_tool": {"sampleRate": 1,
                                                     "filter": "agent == `true`"}}},
    },
    # Zeros are values, not "unset": nothing judged, no cache, a free judge.
    "cost-zeros": {
        "minAcceptableScore": 0.5,
        "cost": {"sampleRate": 0, "judgeCacheSize": 0,
                 "prices": {"inputPerMillion": 0, "outputPerMillion": 0}},
    },
    # No judge: no key and no threshold asked for, and none referenced.
    "key-less": {"rules": ["missing_citation"]},
    # Mutual TLS from a Strimzi KafkaUser Secret, its key encrypted.
    "strimzi-mtls": {
        "rules": ["missing_citation"],
        "kafka": {
            "securityProtocol": "SSL",
            "tls": {"caSecret": "my-cluster-cluster-ca-cert", "clientSecret": "my-user",
                    "keyPasswordKey": "user.key.password"},
        },
    },
    # OAUTHBEARER with the client secret in the chart's Secret.
    "oauth": {
        "rules": ["missing_citation"],
        "secrets": {"kafkaSaslOauthClientSecret": "oauth-s3cret-91"},
        "kafka": {
            "securityProtocol": "SASL_SSL",
            "sasl": {"mechanism": "OAUTHBEARER",
                     "oauth": {"tokenEndpointUrl": "https://sso.example.test/token",
                               "clientId": "gw", "scope": "kafka"}},
        },
    },
    # Amazon MSK with IAM: no client secret, the region for AWS's signer.
    "msk-iam": {
        "rules": ["missing_citation"],
        "kafka": {
            "securityProtocol": "SASL_SSL",
            "sasl": {"mechanism": "OAUTHBEARER",
                     "oauth": {"provider": "aws_msk_iam", "awsRegion": "eu-west-1"}},
        },
        "keda": {"enabled": True, "partitionCount": 6, "maxReplicas": 6},
    },
    # Brokers reached by a name their certificates do not carry.
    "check-hostname-off": {
        "minAcceptableScore": 0.5,
        "kafka": {"securityProtocol": "SSL",
                  "tls": {"caSecret": "kafka-ca", "checkHostname": False}},
    },
    # Verdicts also as OTel events.
    "verdict-events": {
        "minAcceptableScore": 0.5,
        "verdictEvents": {"exporter": "otlp", "otlpEndpoint": "http://otel-collector:4318",
                          "serviceName": "gw"},
    },
    # A key given anyway is left out; the chart's Secret holds only what the pod reads.
    "key-less-sasl": {
        "rules": ["answered_without_tool", "missing_citation"],
        "secrets": {"openaiApiKey": "sk-unused-456", "kafkaSaslPassword": "hunter2"},
        "kafka": {
            "securityProtocol": "SASL_PLAINTEXT",
            "sasl": {"mechanism": "PLAIN", "username": "gw"},
        },
    },
    # The OTel GenAI instrumentation's content from the collector's logs topic, beside its
    # spans; KEDA on the lag of both, through the same authentication.
    "otlp-logs-keda": {
        "minAcceptableScore": 0.5,
        "existingSecret": "gw-creds",
        "kafka": {
            "tracesTopic": "otlp_spans",
            "tracesFormat": "otlp_proto",
            "logsTopic": "otlp_logs",
            "securityProtocol": "SASL_SSL",
            "sasl": {"mechanism": "SCRAM-SHA-512", "username": "groundedness"},
        },
        "keda": {"enabled": True, "partitionCount": 6, "maxReplicas": 6},
    },
}

# Values combinations that must fail to render, with a fragment of the expected message.
INVALID_CASES: dict[str, tuple[Values, tuple[str, ...], str]] = {
    "keda-max-replicas-above-partitions": (
        {
            "minAcceptableScore": 0.5,
            "keda": {"enabled": True, "partitionCount": 3, "maxReplicas": 6},
        },
        (),
        "keda.maxReplicas (6) must not exceed keda.partitionCount (3)",
    ),
    "keda-and-hpa": (
        {
            "minAcceptableScore": 0.5,
            "keda": {"enabled": True, "partitionCount": 6, "maxReplicas": 6},
            "autoscaling": {"enabled": True},
        },
        (),
        "mutually exclusive",
    ),
    "keda-without-partition-count": (
        {"minAcceptableScore": 0.5, "keda": {"enabled": True}},
        (),
        "partitionCount",
    ),
    "missing-min-score": ({}, (), "minAcceptableScore"),
    "missing-min-score-template-check": (
        {},
        ("--skip-schema-validation",),
        "minAcceptableScore is required",
    ),
    "min-score-above-one": ({"minAcceptableScore": 1.5}, (), "minAcceptableScore"),
    "min-score-above-one-without-groundedness": (
        {"rules": ["missing_citation"], "minAcceptableScore": 1.5},
        (),
        "minAcceptableScore",
    ),
    "groundedness-among-rules-without-min-score": (
        {"rules": ["missing_citation", "groundedness"]},
        (),
        "minAcceptableScore",
    ),
    "groundedness-among-rules-without-min-score-template-check": (
        {"rules": ["missing_citation", "groundedness"]},
        ("--skip-schema-validation",),
        "minAcceptableScore is required while rules include groundedness",
    ),
    # Schema messages as helm >= 3.18 words them (scripts/install-helm: 4.1.4, or a 3.22 build).
    "no-rule": ({"rules": []}, (), "at '/rules': minItems"),
    "no-rule-template-check": (
        {"rules": []},
        ("--skip-schema-validation",),
        "rules names no rule; the known rules are groundedness, missing_citation, "
        "answered_without_tool",
    ),
    "unknown-rule": (
        {"minAcceptableScore": 0.5, "rules": ["groundedness", "hallucination"]},
        (),
        "'groundedness', 'missing_citation', 'answered_without_tool'",
    ),
    "unknown-rule-template-check": (
        {"minAcceptableScore": 0.5, "rules": ["groundedness", "hallucination"]},
        ("--skip-schema-validation",),
        'rules: unknown rule "hallucination"; the known rules are',
    ),
    "rules-as-a-comma-string": (
        {"rules": "missing_citation,answered_without_tool"},
        (),
        "at '/rules': got string, want array",
    ),
    "rules-as-a-comma-string-template-check": (
        {"rules": "missing_citation,answered_without_tool"},
        ("--skip-schema-validation",),
        "rules must be a list, e.g. --set 'rules={groundedness,missing_citation}'",
    ),
    "min-score-not-a-number": ({"minAcceptableScore": "high"}, (), "minAcceptableScore"),
    "sample-rate-above-one": (
        {"minAcceptableScore": 0.5, "cost": {"sampleRate": 1.5}}, (), "at '/cost/sampleRate'"),
    "sample-rate-above-one-template-check": (
        {"minAcceptableScore": 0.5, "cost": {"sampleRate": 1.5}},
        ("--skip-schema-validation",),
        "cost.sampleRate must be between 0 and 1 (SAMPLE_RATE), got 1.5",
    ),
    "sample-rate-a-percentage": (
        {"minAcceptableScore": 0.5, "cost": {"sampleRate": "30%"}}, (), "at '/cost/sampleRate'"),
    "sample-rate-null": (
        {"minAcceptableScore": 0.5, "cost": {"sampleRate": None}}, (), "sampleRate"),
    "budget-without-prices": (
        {"minAcceptableScore": 0.5, "cost": {"budgetUsdPerDay": 10}}, (),
        "cost.budgetUsdPerDay needs cost.prices"),
    "budget-zero": (
        {"minAcceptableScore": 0.5, "cost": {"budgetUsdPerDay": 0}}, (), "budgetUsdPerDay"),
    "rule-sample-rate-above-one": (
        {"minAcceptableScore": 0.5, "cost": {"rules": {"groundedness": {"sampleRate": 2}}}}, (),
        "sampleRate"),
    "unknown-rule-selected": (
        {"minAcceptableScore": 0.5, "cost": {"rules": {"groundednes": {"sampleRate": 0.1}}}},
        (), "groundednes"),
    "cache-size-negative": (
        {"minAcceptableScore": 0.5, "cost": {"judgeCacheSize": -1}}, (),
        "at '/cost/judgeCacheSize': minimum: got -1, want 0"),
    "cache-size-negative-template-check": (
        {"minAcceptableScore": 0.5, "cost": {"judgeCacheSize": -1}},
        ("--skip-schema-validation",),
        "cost.judgeCacheSize must be 0 (off) or more (JUDGE_CACHE_SIZE), got -1",
    ),
    "input-price-alone": (
        {"minAcceptableScore": 0.5, "cost": {"prices": {"inputPerMillion": 0.15}}}, (),
        "at '/cost/prices/outputPerMillion'"),
    "output-price-alone-template-check": (
        {"minAcceptableScore": 0.5, "cost": {"prices": {"outputPerMillion": 0.6}}},
        ("--skip-schema-validation",),
        "cost.prices.inputPerMillion and cost.prices.outputPerMillion go together",
    ),
    "negative-price": (
        {"minAcceptableScore": 0.5,
         "cost": {"prices": {"inputPerMillion": -0.15, "outputPerMillion": 0.6}}}, (),
        "at '/cost/prices/inputPerMillion'"),
    "negative-price-template-check": (
        {"minAcceptableScore": 0.5,
         "cost": {"prices": {"inputPerMillion": 0.15, "outputPerMillion": -0.6}}},
        ("--skip-schema-validation",),
        "cost.prices.outputPerMillion cannot be negative, got -0.6",
    ),
    "grace-equal-to-drain": (
        {"minAcceptableScore": 0.5, "drainSeconds": 60, "terminationGracePeriodSeconds": 60},
        (),
        "terminationGracePeriodSeconds (60) must be greater than drainSeconds (60)",
    ),
    "grace-below-drain": (
        {"minAcceptableScore": 0.5, "terminationGracePeriodSeconds": 30},
        (),
        "terminationGracePeriodSeconds (30) must be greater than drainSeconds (45)",
    ),
    "typo-in-key": (
        {"minAcceptableScore": 0.5, "kafka": {"tracesTopc": "x"}},
        (),
        "tracesTopc",
    ),
    "sasl-without-password": (
        {
            "minAcceptableScore": 0.5,
            "kafka": {
                "securityProtocol": "SASL_SSL",
                "sasl": {"mechanism": "PLAIN", "username": "gw"},
            },
        },
        (),
        "secrets.kafkaSaslPassword",
    ),
    # A logs topic joins log records to OTLP spans, read at least once (as the worker's
    # settings refuse the rest: test_the_worker_refuses_the_logs_topics_the_chart_refuses).
    "logs-topic-with-trace-events": (
        {"minAcceptableScore": 0.5, "kafka": {"logsTopic": "otlp_logs"}},
        (),
        "at '/kafka/tracesFormat': value must be one of 'otlp_proto', 'otlp_json'",
    ),
    "logs-topic-with-trace-events-template-check": (
        {"minAcceptableScore": 0.5, "kafka": {"logsTopic": "otlp_logs"}},
        ("--skip-schema-validation",),
        "kafka.logsTopic (OTLP_LOGS_TOPIC) is set but kafka.tracesFormat is trace_json: log "
        "records join spans, so use otlp_proto or otlp_json",
    ),
    "logs-topic-with-exactly-once": (
        {"minAcceptableScore": 0.5, "kafka": {
            "tracesFormat": "otlp_proto", "logsTopic": "otlp_logs", "delivery": "exactly_once"}},
        (),
        "at '/kafka/delivery': value must be 'at_least_once'",
    ),
    "logs-topic-with-exactly-once-template-check": (
        {"minAcceptableScore": 0.5, "kafka": {
            "tracesFormat": "otlp_json", "logsTopic": "otlp_logs", "delivery": "exactly_once"}},
        ("--skip-schema-validation",),
        "kafka.logsTopic (OTLP_LOGS_TOPIC) does not work with kafka.delivery exactly_once yet",
    ),
    "logs-topic-is-the-traces-topic": (
        {"minAcceptableScore": 0.5, "kafka": {
            "tracesTopic": "otlp_spans", "tracesFormat": "otlp_proto", "logsTopic": "otlp_spans"}},
        (),
        "kafka.logsTopic is kafka.tracesTopic (otlp_spans): the collector writes spans and logs "
        "to topics of their own",
    ),
    "logs-topic-not-a-topic-name": (
        {"minAcceptableScore": 0.5, "kafka": {
            "tracesFormat": "otlp_proto", "logsTopic": "otlp logs"}},
        (),
        "at '/kafka/logsTopic'",
    ),
    "ca-without-tls": (
        {"minAcceptableScore": 0.5, "kafka": {"tls": {"caSecret": "kafka-ca"}}},
        (),
        "kafka.securityProtocol is PLAINTEXT",
    ),
}



@pytest.fixture(scope="session")
def render(helm: Helm) -> Callable[[str], list[Manifest]]:
    """Render a VALID_CASES entry (once per session) into its list of objects."""
    cache: dict[str, list[Manifest]] = {}

    def _render(case: str) -> list[Manifest]:
        if case not in cache:
            result = helm.template(VALID_CASES[case])
            assert result.returncode == 0, result.stderr
            cache[case] = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
        return cache[case]

    return _render


def objects(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m["kind"] == kind]


def one(manifests: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = [m for m in objects(manifests, kind) if name is None or m["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def worker_container(manifests: list[Manifest]) -> Manifest:
    containers = one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["worker"]
    container: Manifest = containers[0]
    return container


def config(manifests: list[Manifest]) -> dict[str, str]:
    data: dict[str, str] = one(manifests, "ConfigMap")["data"]
    return data


def env_by_name(manifests: list[Manifest]) -> dict[str, Manifest]:
    return {e["name"]: e for e in worker_container(manifests).get("env", [])}


def secret_ref(manifests: list[Manifest], variable: str) -> tuple[str, str]:
    ref = env_by_name(manifests)[variable]["valueFrom"]["secretKeyRef"]
    return ref["name"], ref["key"]


def scaler_auth(manifests: list[Manifest]) -> dict[str, Manifest]:
    auth = one(manifests, "TriggerAuthentication")["spec"]
    refs = [*auth.get("secretTargetRef", []), *auth.get("configMapTargetRef", [])]
    return {ref["parameter"]: ref for ref in refs}


def judging(case: str) -> bool:
    """Whether a VALID_CASES entry runs the judge (the chart's default rules do)."""
    return "groundedness" in VALID_CASES[case].get("rules", ["groundedness"])


# --- every valid combination ---


@pytest.mark.parametrize("case", list(VALID_CASES), ids=list(VALID_CASES))
def test_lint_passes(helm: Helm, case: str) -> None:
    result = helm.run("lint", str(CHART), "--strict", values=VALID_CASES[case])
    assert result.returncode == 0, result.stdout + result.stderr


def test_ci_values_lint(helm: Helm) -> None:
    for values_file in sorted((CHART / "ci").glob("*-values.yaml")):
        result = helm.run("lint", str(CHART), "--strict", "--values", str(values_file))
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("case", list(VALID_CASES), ids=list(VALID_CASES))
def test_configmap_keys_are_contract_names(
    render: Callable[[str], list[Manifest]], case: str
) -> None:
    manifests = render(case)
    data = config(manifests)
    assert set(data) <= (WORKER_VARS | OTEL_SDK_VARS) - SECRET_VARS
    assert set(data) >= ALWAYS_CONFIGURED
    assert all(isinstance(value, str) for value in data.values())
    for key in INTEGER_VARS & set(data):
        assert re.fullmatch(r"[0-9]+", data[key]), f"{key}={data[key]!r}"
    assert data["RULES"] == ",".join(VALID_CASES[case].get("rules", ["groundedness"]))
    if judging(case):
        assert 0 <= float(data["MIN_ACCEPTABLE_SCORE"]) <= 1
    container = worker_container(manifests)
    assert container["envFrom"] == [
        {"configMapRef": {"name": one(manifests, "ConfigMap")["metadata"]["name"]}}
    ]


@pytest.mark.parametrize("case", list(VALID_CASES), ids=list(VALID_CASES))
def test_secrets_come_from_secret_refs(render: Callable[[str], list[Manifest]], case: str) -> None:
    manifests = render(case)
    env = env_by_name(manifests)
    assert set(env) <= WORKER_VARS
    assert ("OPENAI_API_KEY" in env) is judging(case)
    for name in SECRET_VARS & set(env):
        assert "value" not in env[name]
        assert set(env[name]["valueFrom"]) == {"secretKeyRef"}
    # No secret value leaks into anything but a Secret.
    secrets = VALID_CASES[case].get("secrets", {})
    for manifest in manifests:
        if manifest["kind"] != "Secret":
            for secret in secrets.values():
                assert all(secret not in text for text in iter_strings(manifest))


@pytest.mark.parametrize("case", list(VALID_CASES), ids=list(VALID_CASES))
def test_probes_ports_and_security(render: Callable[[str], list[Manifest]], case: str) -> None:
    manifests = render(case)
    data = config(manifests)
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    container = worker_container(manifests)
    assert container["command"] == ["groundedness"]
    assert container["args"] == ["run"]

    assert container["ports"] == [
        {"name": "health", "containerPort": int(data["HEALTH_PORT"]), "protocol": "TCP"}
    ]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}

    security = container["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] == 10001
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False

    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["tmp"] == TMP_MOUNT
    assert "emptyDir" in volumes["tmp"]

    assert pod["terminationGracePeriodSeconds"] > int(data["DRAIN_TIMEOUT_SECONDS"])

    resources = container["resources"]
    assert resources["requests"] == {"cpu": "100m", "memory": "256Mi"}
    assert resources["limits"]["memory"] == "512Mi"

    annotations = one(manifests, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/config"])


@pytest.mark.parametrize("case", list(VALID_CASES), ids=list(VALID_CASES))
def test_service_pdb_and_service_account(
    render: Callable[[str], list[Manifest]], case: str
) -> None:
    manifests = render(case)
    deployment = one(manifests, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    service = one(manifests, "Service")
    assert service["spec"]["ports"] == [
        {
            "name": "health",
            "port": int(config(manifests)["HEALTH_PORT"]),
            "targetPort": "health",
            "protocol": "TCP",
        }
    ]
    assert service["spec"]["selector"].items() <= pod_labels.items()

    pdb = one(manifests, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()

    account = one(manifests, "ServiceAccount")
    assert (
        deployment["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
    )

    scaled = bool(
        objects(manifests, "ScaledObject") or objects(manifests, "HorizontalPodAutoscaler")
    )
    assert ("replicas" in deployment["spec"]) is not scaled


def test_every_contract_variable_can_be_set(render: Callable[[str], list[Manifest]]) -> None:
    # A variable added to the contract but not to the chart fails here.
    named: set[str] = set()
    for case in VALID_CASES:
        manifests = render(case)
        named |= set(config(manifests)) | set(env_by_name(manifests))
    assert sorted(WORKER_VARS - named) == []


def test_the_chart_knows_the_workers_rules() -> None:
    # A rule added to the registry but not to the chart could not be configured with it.
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    assert tuple(schema["properties"]["rules"]["items"]["enum"]) == KNOWN_RULES
    helpers = (CHART / "templates" / "_helpers.tpl").read_text(encoding="utf-8")
    assert f"\n{', '.join(KNOWN_RULES)}\n" in helpers


def test_the_chart_knows_the_workers_input_formats() -> None:
    # A format added to the registry but not to the chart would be refused by the chart.
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    kafka = schema["properties"]["kafka"]["properties"]
    assert kafka["tracesFormat"]["enum"] == list(FORMATS)


# --- specific combinations ---


def test_defaults(render: Callable[[str], list[Manifest]]) -> None:
    manifests = render("defaults")
    data = config(manifests)
    assert data["MIN_ACCEPTABLE_SCORE"] == "0.5"
    assert data["TRACES_TOPIC"] == "llm-traces"
    assert data["VERDICTS_TOPIC"] == "groundedness-verdicts"
    assert data["DLQ_TOPIC"] == "groundedness-dlq"
    assert data["CONSUMER_GROUP"] == "groundedness-worker"
    assert data["HEALTH_PORT"] == "8080"
    assert data["DRAIN_TIMEOUT_SECONDS"] == "45"
    assert data["KAFKA_SECURITY_PROTOCOL"] == "PLAINTEXT"
    assert data["RULES"] == "groundedness"
    for unset in (
        "CITATION_PATTERN",
        "OPENAI_BASE_URL",
        "JUDGE_REQUESTS_PER_MINUTE",
        "JUDGE_TOKENS_PER_MINUTE",
        "KAFKA_SASL_MECHANISM",
        "KAFKA_SASL_USERNAME",
        "KAFKA_SSL_CAFILE",
        "TRACE_FILTER",
        "JUDGE_PRICE_INPUT_PER_MILLION",
        "JUDGE_PRICE_OUTPUT_PER_MILLION",
        "OTLP_LOGS_TOPIC",
    ):
        assert unset not in data
    assert (data["SAMPLE_RATE"], data["JUDGE_CACHE_SIZE"]) == ("1", "10000")

    deployment = one(manifests, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]
    assert pod["spec"]["terminationGracePeriodSeconds"] == 60
    assert "checksum/secret" in pod["metadata"]["annotations"]
    assert worker_container(manifests)["image"] == "groundedness-worker:0.1.0"

    secret = one(manifests, "Secret", FULLNAME)
    assert secret_ref(manifests, "OPENAI_API_KEY") == (FULLNAME, "OPENAI_API_KEY")
    assert "KAFKA_SASL_PASSWORD" not in env_by_name(manifests)
    # No key given: the Secret has no entry, so the pod cannot start without one.
    assert secret["data"] == {}

    for kind in (
        "ScaledObject",
        "TriggerAuthentication",
        "HorizontalPodAutoscaler",
        "ServiceMonitor",
    ):
        assert objects(manifests, kind) == []


def test_existing_secret(render: Callable[[str], list[Manifest]]) -> None:
    manifests = render("existing-secret")
    assert objects(manifests, "Secret") == []
    assert secret_ref(manifests, "OPENAI_API_KEY") == ("gw-creds", "openai-key")
    annotations = one(manifests, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/secret" not in annotations


def test_chart_secret_with_sasl(render: Callable[[str], list[Manifest]]) -> None:
    manifests = render("chart-secret-sasl-plain")
    secret = one(manifests, "Secret", FULLNAME)
    assert set(secret["data"]) == {"OPENAI_API_KEY", "KAFKA_SASL_PASSWORD"}
    assert secret_ref(manifests, "OPENAI_API_KEY") == (FULLNAME, "OPENAI_API_KEY")
    assert secret_ref(manifests, "KAFKA_SASL_PASSWORD") == (FULLNAME, "KAFKA_SASL_PASSWORD")
    data = config(manifests)
    assert data["KAFKA_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"
    assert data["KAFKA_SASL_MECHANISM"] == "PLAIN"
    assert data["KAFKA_SASL_USERNAME"] == "gw"
    assert "KAFKA_SSL_CAFILE" not in data


def test_changing_config_or_secret_rolls_pods(helm: Helm) -> None:
    def annotations(values: Values) -> dict[str, str]:
        result = helm.template(values)
        assert result.returncode == 0, result.stderr
        deployment = one([d for d in yaml.safe_load_all(result.stdout) if d], "Deployment")
        found: dict[str, str] = deployment["spec"]["template"]["metadata"]["annotations"]
        return found

    base = annotations({"minAcceptableScore": 0.5})
    other_config = annotations({"minAcceptableScore": 0.6})
    other_secret = annotations({"minAcceptableScore": 0.5, "secrets": {"openaiApiKey": "k2"}})
    assert base["checksum/config"] != other_config["checksum/config"]
    assert base["checksum/secret"] == other_config["checksum/secret"]
    assert base["checksum/secret"] != other_secret["checksum/secret"]


def test_all_rules_and_a_citation_pattern(render: Callable[[str], list[Manifest]]) -> None:
    manifests = render("all-rules")
    data = config(manifests)
    assert data["RULES"] == "groundedness,missing_citation,answered_without_tool"
    # The regex reaches the worker as written: quoting keeps its backslashes and brackets.
    assert data["CITATION_PATTERN"] == r"\[\d+\]|【\d+】"
    assert data["MIN_ACCEPTABLE_SCORE"] == "0.5"
    assert secret_ref(manifests, "OPENAI_API_KEY") == (FULLNAME, "OPENAI_API_KEY")


def test_without_groundedness_no_key_and_no_threshold(
    render: Callable[[str], list[Manifest]],
) -> None:
    manifests = render("key-less")
    data = config(manifests)
    assert data["RULES"] == "missing_citation"
    assert "MIN_ACCEPTABLE_SCORE" not in data
    assert "env" not in worker_container(manifests)
    # No Secret to fill in, and nothing anywhere that names the key.
    assert objects(manifests, "Secret") == []
    assert not any("OPENAI_API_KEY" in text for m in manifests for text in iter_strings(m))
    annotations = one(manifests, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/secret" not in annotations


def test_without_groundedness_the_secret_holds_only_the_sasl_password(
    render: Callable[[str], list[Manifest]],
) -> None:
    manifests = render("key-less-sasl")
    secret = one(manifests, "Secret", FULLNAME)
    assert set(secret["data"]) == {"KAFKA_SASL_PASSWORD"}
    unused_key = VALID_CASES["key-less-sasl"]["secrets"]["openaiApiKey"]
    assert base64.b64encode(unused_key.encode()).decode() not in secret["data"].values()
    assert set(env_by_name(manifests)) == {"KAFKA_SASL_PASSWORD"}
    assert secret_ref(manifests, "KAFKA_SASL_PASSWORD") == (FULLNAME, "KAFKA_SASL_PASSWORD")
    assert config(manifests)["RULES"] == "answered_without_tool,missing_citation"


def test_a_threshold_given_without_groundedness_still_reaches_the_worker(helm: Helm) -> None:
    # The worker checks it even unused; adding groundedness later needs no other change.
    result = helm.template({"rules": ["missing_citation"], "minAcceptableScore": 0.6})
    assert result.returncode == 0, result.stderr
    manifests = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    assert config(manifests)["MIN_ACCEPTABLE_SCORE"] == "0.6"


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        pytest.param("cost-controls", ("0.3", FILTER, "500", "0.15", "0.6", "25", "0.075"),
                     id="set"),
        pytest.param("cost-zeros", ("0", None, "0", "0", "0", None, None), id="zeros"),
        pytest.param("defaults", ("1", None, "10000", None, None, None, None), id="defaults"),
    ],
)
def test_the_cost_controls_reach_the_worker_as_it_reads_them(
    render: Callable[[str], list[Manifest]], monkeypatch: pytest.MonkeyPatch, case: str,
    expected: tuple[str | None, ...],
) -> None:
    data = config(render(case))
    names = ("SAMPLE_RATE", "TRACE_FILTER", "JUDGE_CACHE_SIZE", "JUDGE_PRICE_INPUT_PER_MILLION",
             "JUDGE_PRICE_OUTPUT_PER_MILLION", "JUDGE_BUDGET_USD_PER_DAY",
             "JUDGE_PRICE_CACHED_INPUT_PER_MILLION")
    assert tuple(data.get(name) for name in names) == expected
    # The ConfigMap as the pod's environment: the worker's own settings accept every value
    # (the filter compiles, the rate and prices parse) and read what the values said.
    for name in WORKER_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in data.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.sample_rate == float(expected[0] or 1)
    assert (settings.trace_filter.expression if settings.trace_filter else None) == expected[1]
    assert settings.judge_cache_size == int(expected[2] or 0)
    assert (settings.judge_price_input_per_million,
            settings.judge_price_output_per_million, settings.judge_budget_usd_per_day,
            settings.judge_price_cached_input_per_million) == tuple(
        None if price is None else float(price) for price in expected[3:])


def test_each_rules_sample_rate_and_filter_reach_the_worker(
    render: Callable[[str], list[Manifest]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = config(render("per-rule"))
    assert {name: value for name, value in data.items() if name.startswith(
        ("GROUNDEDNESS_", "MISSING_CITATION_", "ANSWERED_WITHOUT_TOOL_"))} == {
        "GROUNDEDNESS_SAMPLE_RATE": "0.1", "GROUNDEDNESS_FILTER": "service == 'support-bot'",
        "MISSING_CITATION_SAMPLE_RATE": "0", "MISSING_CITATION_FILTER": FILTER,
        "ANSWERED_WITHOUT_TOOL_SAMPLE_RATE": "1",
        "ANSWERED_WITHOUT_TOOL_FILTER": "agent == `true`"}
    for name in WORKER_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in data.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert [settings.selection(rule).rate for rule in settings.rules] == [0.1, 0.0, 1.0]
    chosen = [settings.selection(rule).trace_filter for rule in settings.rules]
    assert [c.expression if c else None for c in chosen] == [
        "service == 'support-bot'", FILTER, "agent == `true`"]


def test_keda_with_sasl_and_tls(render: Callable[[str], list[Manifest]]) -> None:
    manifests = render("sasl-tls-keda")
    data = config(manifests)
    scaled = one(manifests, "ScaledObject")["spec"]
    assert scaled["scaleTargetRef"]["name"] == one(manifests, "Deployment")["metadata"]["name"]
    assert scaled["minReplicaCount"] == 1
    assert scaled["maxReplicaCount"] == 12
    assert scaled["maxReplicaCount"] <= SASL_TLS_KEDA["keda"]["partitionCount"]

    [trigger] = scaled["triggers"]
    assert trigger["type"] == "kafka"
    assert trigger["metadata"] == {
        "bootstrapServers": data["KAFKA_BOOTSTRAP_SERVERS"],
        "consumerGroup": data["CONSUMER_GROUP"],
        "topic": data["TRACES_TOPIC"],
        "lagThreshold": "250",
        "activationLagThreshold": "5",
        "offsetResetPolicy": "latest",
        "allowIdleConsumers": "false",
    }
    assert data["TRACES_TOPIC"] == "prod-llm-traces"
    auth_object = one(manifests, "TriggerAuthentication")
    assert trigger["authenticationRef"] == {"name": auth_object["metadata"]["name"]}

    auth = scaler_auth(manifests)
    assert set(auth) == {"sasl", "username", "password", "tls", "ca"}
    # The password is read from the very Secret/key the worker gets KAFKA_SASL_PASSWORD from.
    password = auth["password"]
    assert (password["name"], password["key"]) == secret_ref(manifests, "KAFKA_SASL_PASSWORD")
    assert (password["name"], password["key"]) == ("gw-creds", "kafka-pass")
    assert (auth["ca"]["name"], auth["ca"]["key"]) == ("kafka-ca", "ca.pem")

    params = {}
    for parameter in ("sasl", "username", "tls"):
        ref = auth[parameter]
        params[parameter] = one(manifests, "Secret", ref["name"])["stringData"][ref["key"]]
    assert params == {"sasl": "scram_sha512", "username": "groundedness", "tls": "enable"}

    assert data["KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert data["KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert data["KAFKA_SASL_USERNAME"] == "groundedness"
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    ca_volume = {v["name"]: v for v in pod["volumes"]}["kafka-ca"]
    assert ca_volume["secret"] == {
        "secretName": "kafka-ca",
        "items": [{"key": "ca.pem", "path": "ca.crt"}],
    }
    [mount] = [m for m in worker_container(manifests)["volumeMounts"] if m["name"] == "kafka-ca"]
    assert mount["readOnly"] is True
    assert data["KAFKA_SSL_CAFILE"] == f"{mount['mountPath']}/ca.crt"
    assert objects(manifests, "HorizontalPodAutoscaler") == []


def test_the_logs_topic_reaches_the_worker_and_its_lag_scales_it(
    render: Callable[[str], list[Manifest]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    manifests = render("otlp-logs-keda")
    data = config(manifests)
    assert (data["TRACES_TOPIC"], data["TRACES_FORMAT"], data["OTLP_LOGS_TOPIC"]) == (
        "otlp_spans", "otlp_proto", "otlp_logs")
    # The ConfigMap as the pod's environment: the worker's settings take the combination.
    for name in WORKER_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in data.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "from-gw-creds")  # the pod's, from the Secret
    settings = load_settings()
    assert (settings.traces_topic, settings.otlp_logs_topic) == ("otlp_spans", "otlp_logs")
    # A backlog of log records is work as much as one of spans: a trigger for each topic,
    # alike but for the topic, authenticated the same way.
    spans, logs = one(manifests, "ScaledObject")["spec"]["triggers"]
    assert spans["metadata"]["topic"] == "otlp_spans"
    assert logs["metadata"] == spans["metadata"] | {"topic": "otlp_logs"}
    assert logs["authenticationRef"] == spans["authenticationRef"] == {
        "name": one(manifests, "TriggerAuthentication")["metadata"]["name"]}


# Each chart refusal of a logs topic, as the worker's variables.
LOGS_TOPIC_REFUSALS = ["logs-topic-with-trace-events", "logs-topic-with-exactly-once",
                       "logs-topic-is-the-traces-topic"]
KAFKA_VALUE_VARS = {"tracesTopic": "TRACES_TOPIC", "tracesFormat": "TRACES_FORMAT",
                    "logsTopic": "OTLP_LOGS_TOPIC", "delivery": "DELIVERY"}


@pytest.mark.parametrize("case", LOGS_TOPIC_REFUSALS)
def test_the_worker_refuses_the_logs_topics_the_chart_refuses(
    monkeypatch: pytest.MonkeyPatch, case: str,
) -> None:
    # The chart is no stricter than the worker: each combination it refuses would stop the
    # pod at start anyway, with the same reason.
    for name in WORKER_VARS:
        monkeypatch.delenv(name, raising=False)
    for key, value in INVALID_CASES[case][0]["kafka"].items():
        monkeypatch.setenv(KAFKA_VALUE_VARS[key], value)
    with pytest.raises(ConfigError, match="OTLP_LOGS_TOPIC"):
        load_settings(require_threshold=False)


def test_keda_with_tls_and_configmap_ca(render: Callable[[str], list[Manifest]]) -> None:
    manifests = render("tls-configmap-ca-keda")
    auth = scaler_auth(manifests)
    assert set(auth) == {"tls", "ca"}
    assert (auth["ca"]["name"], auth["ca"]["key"]) == ("kafka-ca-bundle", "ca.crt")
    spec = one(manifests, "TriggerAuthentication")["spec"]
    assert [ref["parameter"] for ref in spec["configMapTargetRef"]] == ["ca"]
    tls = auth["tls"]
    assert one(manifests, "Secret", tls["name"])["stringData"][tls["key"]] == "enable"
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    ca_volume = {v["name"]: v for v in pod["volumes"]}["kafka-ca"]
    assert ca_volume["configMap"]["name"] == "kafka-ca-bundle"
    assert config(manifests)["KAFKA_SSL_CAFILE"].endswith("/ca.crt")
    assert "KAFKA_SASL_PASSWORD" not in env_by_name(manifests)


def test_keda_without_kafka_auth(render: Callable[[str], list[Manifest]]) -> None:
    manifests = render("keda-plaintext")
    scaled = one(manifests, "ScaledObject")["spec"]
    assert scaled["minReplicaCount"] == 0
    assert scaled["maxReplicaCount"] == 3
    [trigger] = scaled["triggers"]
    assert "authenticationRef" not in trigger
    assert trigger["metadata"]["allowIdleConsumers"] == "false"
    assert trigger["metadata"]["offsetResetPolicy"] == "earliest"
    assert objects(manifests, "TriggerAuthentication") == []


def test_hpa(render: Callable[[str], list[Manifest]]) -> None:
    manifests = render("hpa")
    hpa = one(manifests, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": one(manifests, "Deployment")["metadata"]["name"],
    }
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 5)
    [metric] = spec["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"] == {"type": "Utilization", "averageUtilization": 65}
    assert objects(manifests, "ScaledObject") == []


def test_service_monitor(render: Callable[[str], list[Manifest]]) -> None:
    manifests = render("service-monitor")
    monitor = one(manifests, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["interval"] == "15s"
    service = one(manifests, "Service")
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


def test_judge_options(render: Callable[[str], list[Manifest]]) -> None:
    manifests = render("judge-options")
    data = config(manifests)
    assert data["MIN_ACCEPTABLE_SCORE"] == "0.75"
    assert data["OPENAI_BASE_URL"] == "http://local-judge:8000/v1"
    assert data["JUDGE_MODEL"] == "judge-large"
    assert data["JUDGE_REQUESTS_PER_MINUTE"] == "600"
    assert data["JUDGE_TOKENS_PER_MINUTE"] == "2000000"
    assert data["JUDGE_TIMEOUT_SECONDS"] == "12.5"
    assert data["MAX_DOCUMENT_CHARS"] == "1500000"
    assert data["CONTEXT_FIELD"] == "input"
    assert data["HEALTH_PORT"] == "9090"
    assert data["DRAIN_TIMEOUT_SECONDS"] == "100"
    assert (data["LOG_LEVEL"], data["LOG_FORMAT"]) == ("debug", "console")
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 130


def test_score_zero_is_a_valid_threshold(render: Callable[[str], list[Manifest]]) -> None:
    assert config(render("score-zero"))["MIN_ACCEPTABLE_SCORE"] == "0"


# --- combinations that must not render ---


@pytest.mark.parametrize(
    ("values", "extra_args", "message"),
    list(INVALID_CASES.values()),
    ids=list(INVALID_CASES),
)
def test_invalid_values_fail(
    helm: Helm, values: Values, extra_args: tuple[str, ...], message: str
) -> None:
    # `helm template` (like install/upgrade) fails; `helm lint` only logs a template's `fail`.
    result = helm.template(values, *extra_args)
    assert result.returncode != 0
    assert message in result.stderr
