"""The settings as ``groundedness run --help`` lists them: every ``Settings`` field in one group
(``GROUPS``; a unit test refuses a field in none), with its variable and its default.

Only defaults are shown, never the environment's values, and a secret's default is not either.
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, SecretStr
from pydantic.fields import FieldInfo

from consumer.settings import SECRET_FIELDS, Settings

DOCS = "docs/configuration.md in the project's source (not installed by pip)"

# (group, its settings by field name), in the order of docs/configuration.md's table.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Kafka", ("kafka_bootstrap_servers", "consumer_group", "delivery")),
    ("Topics and input", (
        "traces_topic", "verdicts_topic", "dlq_topic", "traces_format", "otlp_logs_topic",
        "trace_quiet_seconds", "trace_max_wait_seconds", "max_open_traces")),
    ("Judge", (
        "openai_api_key", "openai_base_url", "judge_model", "min_acceptable_score",
        "judge_timeout_seconds", "judge_max_concurrency", "judge_requests_per_minute",
        "judge_tokens_per_minute", "max_documents", "max_document_chars", "max_output_chars",
        "context_field")),
    ("Rules", ("rules", "citation_pattern")),
    ("Cost controls", (
        "sample_rate", "trace_filter", "groundedness_sample_rate", "groundedness_filter",
        "missing_citation_sample_rate", "missing_citation_filter",
        "answered_without_tool_sample_rate", "answered_without_tool_filter",
        "judge_cache_size", "judge_price_input_per_million", "judge_price_output_per_million",
        "judge_price_cached_input_per_million", "judge_budget_usd_per_day")),
    ("Health, metrics and logs", (
        "health_port", "metrics_max_projects", "log_level", "log_format",
        "drain_timeout_seconds")),
    ("Verdict events", (
        "verdict_events", "otel_exporter_otlp_headers", "otel_exporter_otlp_logs_headers")),
    ("Kafka security", (
        "kafka_security_protocol", "kafka_sasl_mechanism", "kafka_sasl_username",
        "kafka_sasl_password", "kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile",
        "kafka_ssl_key_password", "kafka_ssl_check_hostname", "kafka_sasl_oauth_provider",
        "kafka_sasl_oauth_token_endpoint_url", "kafka_sasl_oauth_client_id",
        "kafka_sasl_oauth_client_secret", "kafka_sasl_oauth_scope", "aws_region")),
)

# Where the default alone would mislead.
_SHOWN_DEFAULTS = {
    "min_acceptable_score": "required while RULES includes groundedness",
    "citation_pattern": "the default markers",
    "trace_filter": "unset (every trace)",
    "groundedness_sample_rate": "unset (SAMPLE_RATE)",
    "missing_citation_sample_rate": "unset (1)",
    "answered_without_tool_sample_rate": "unset (1)",
    "groundedness_filter": "unset (TRACE_FILTER)",
    "missing_citation_filter": "unset (TRACE_FILTER)",
    "answered_without_tool_filter": "unset (TRACE_FILTER)",
    "judge_budget_usd_per_day": "unset (no cap)",
    "judge_price_cached_input_per_million": "unset (the input price)",
}


def settings_help() -> str:
    """The grouped list of variables and defaults, for an argparse epilog."""
    fields = Settings.model_fields
    width = max(len(_variable(name, fields[name])) for _, names in GROUPS for name in names)
    lines = [f"settings (environment variables; each explained in {DOCS}):"]
    for group, names in GROUPS:
        lines.append(f"  {group}:")
        lines.extend(f"    {_variable(name, fields[name]):<{width}}  {_default(name, fields[name])}"
                     for name in names)
    return "\n".join(lines)


def _variable(name: str, field: FieldInfo) -> str:
    """The variable's name, and the other names it is read under (``AWS_DEFAULT_REGION``)."""
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return " or ".join(str(choice).upper() for choice in alias.choices)
    return name.upper()


def _default(name: str, field: FieldInfo) -> str:
    if name in SECRET_FIELDS:
        return "unset (secret)"  # a secret's value is never shown, a default one neither
    if name in _SHOWN_DEFAULTS:
        return _SHOWN_DEFAULTS[name]
    return _shown(field.get_default(call_default_factory=True))


def _shown(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return str(value)
