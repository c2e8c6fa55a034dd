"""The configuration contract (DESIGN.md): the variable names the worker reads.

Kept in one place for the tests that check the chart, the compose file and the settings
against it; written out, not derived from ``Settings``, so that a renamed field fails them.
"""

from __future__ import annotations

CONTRACT_VARS = frozenset(
    {
        "KAFKA_BOOTSTRAP_SERVERS",
        "TRACES_TOPIC",
        "VERDICTS_TOPIC",
        "DLQ_TOPIC",
        "CONSUMER_GROUP",
        "DELIVERY",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "JUDGE_MODEL",
        "JUDGE_TIMEOUT_SECONDS",
        "JUDGE_MAX_CONCURRENCY",
        "JUDGE_REQUESTS_PER_MINUTE",
        "JUDGE_TOKENS_PER_MINUTE",
        "MIN_ACCEPTABLE_SCORE",
        "MAX_DOCUMENTS",
        "MAX_DOCUMENT_CHARS",
        "MAX_OUTPUT_CHARS",
        "CONTEXT_FIELD",
        "HEALTH_PORT",
        "LOG_LEVEL",
        "LOG_FORMAT",
        "KAFKA_SECURITY_PROTOCOL",
        "KAFKA_SASL_MECHANISM",
        "KAFKA_SASL_USERNAME",
        "KAFKA_SASL_PASSWORD",
        "KAFKA_SSL_CAFILE",
        "KAFKA_SSL_CERTFILE",
        "KAFKA_SSL_KEYFILE",
        "KAFKA_SSL_KEY_PASSWORD",
        "KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL",
        "KAFKA_SASL_OAUTH_CLIENT_ID",
        "KAFKA_SASL_OAUTH_CLIENT_SECRET",
        "KAFKA_SASL_OAUTH_SCOPE",
        "TRACES_FORMAT",
        "OTLP_LOGS_TOPIC",
        "TRACE_QUIET_SECONDS",
        "TRACE_MAX_WAIT_SECONDS",
        "MAX_OPEN_TRACES",
        "RULES",
        "CITATION_PATTERN",
        "SAMPLE_RATE",
        "TRACE_FILTER",
        *(f"{rule}_{control}" for rule in ("GROUNDEDNESS", "MISSING_CITATION",
                                           "ANSWERED_WITHOUT_TOOL")
          for control in ("SAMPLE_RATE", "FILTER")),
        "JUDGE_CACHE_SIZE",
        "JUDGE_PRICE_INPUT_PER_MILLION",
        "JUDGE_PRICE_OUTPUT_PER_MILLION",
        "JUDGE_BUDGET_USD_PER_DAY",
        "JUDGE_PRICE_CACHED_INPUT_PER_MILLION",
        "METRICS_MAX_PROJECTS",
        "VERDICT_EVENTS",
    }
)
# Beyond the contract, the worker's own Kafka additions: who issues the OAUTHBEARER token
# (Amazon MSK IAM), its AWS region, and turning hostname verification off.
KAFKA_EXTRA_VARS = frozenset(
    {"KAFKA_SASL_OAUTH_PROVIDER", "AWS_REGION", "KAFKA_SSL_CHECK_HOSTNAME"}
)
# Beyond the contract: those, and the drain time, which the chart ties to the pod's grace period.
WORKER_VARS = CONTRACT_VARS | KAFKA_EXTRA_VARS | {"DRAIN_TIMEOUT_SECONDS"}
# The OTel SDK's own variables, which the chart sets for VERDICT_EVENTS=otlp (read by the SDK).
OTEL_SDK_VARS = frozenset({"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"})
