"""Configuration from the environment: the only module that reads it.

Every name is the contract's (DESIGN.md). A bad value is refused at start with one line
naming the variable (``ConfigError``); secrets are ``SecretStr`` and never echoed back.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal
from urllib.parse import unquote, urlsplit

from pydantic import (
    AliasChoices,
    Field,
    InstanceOf,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticUseDefault
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from consumer.cost.rule_selection import Selection
from consumer.cost.trace_filter import SETTING as FILTER_SETTING
from consumer.cost.trace_filter import TraceFilter, compile_filter
from consumer.errors import ConfigError
from consumer.inputs import FormatName
from consumer.judge.request_shape import minimum_request_tokens
from consumer.rules.linear_regex import LinearPattern
from consumer.rules.missing_citation import compile_citation_pattern
from consumer.rules.registry import GROUNDEDNESS, parse_rules

SCORE_REQUIRED = "Minimum acceptable score is required."
SCORE_ABOVE_ONE = "Minimum acceptable score cannot exceed 1."
SCORE_BELOW_ZERO = "Minimum acceptable score cannot be below 0."
SECRET_FIELDS = frozenset({
    "openai_api_key", "kafka_sasl_password", "kafka_ssl_key_password",
    "kafka_sasl_oauth_client_secret", "otel_exporter_otlp_headers",
    "otel_exporter_otlp_logs_headers",
})
# A header value shorter than this is not redacted (``x-tenant=prod`` would cut every "prod"
# out of the logs).
MIN_HEADER_SECRET_CHARS = 8

ContextField = Literal["retrieved_documents", "input", "expected_output"]


class Settings(BaseSettings):
    """The worker's configuration; field names are the environment variables, lower-cased."""

    model_config = SettingsConfigDict(case_sensitive=False, extra="ignore", frozen=True)

    kafka_bootstrap_servers: str = "localhost:9092"
    traces_topic: str = "llm-traces"
    verdicts_topic: str = "groundedness-verdicts"
    dlq_topic: str = "groundedness-dlq"
    consumer_group: str = "groundedness-worker"
    delivery: Literal["at_least_once", "exactly_once"] = "at_least_once"

    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None
    judge_model: str = "gpt-4o-mini"
    judge_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    judge_max_concurrency: int = Field(default=16, ge=1, le=4096)
    judge_requests_per_minute: int | None = Field(default=None, gt=0)
    judge_tokens_per_minute: int | None = Field(default=None, gt=0)

    min_acceptable_score: float | None = None
    max_documents: int = Field(default=12, ge=1)
    max_document_chars: int = Field(default=2000, ge=1)
    max_output_chars: int = Field(default=4000, ge=1)
    context_field: ContextField = "retrieved_documents"

    # Telemetry input (DESIGN.md): how records decode, and when an assembled trace is ready.
    traces_format: FormatName = "trace_json"
    # The collector's logs topic, read with the spans (DESIGN.md, "OTel GenAI content in log
    # records"): the OTel GenAI instrumentation's message content, joined to its spans.
    otlp_logs_topic: str | None = None
    trace_quiet_seconds: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    trace_max_wait_seconds: float = Field(default=120.0, gt=0, allow_inf_nan=False)
    max_open_traces: int = Field(default=10_000, ge=1)

    # Rules (DESIGN.md): which run on each trace, and what missing_citation takes for a citation.
    rules: Annotated[tuple[str, ...], NoDecode] = (GROUNDEDNESS,)
    citation_pattern: InstanceOf[LinearPattern] | None = None  # RE2: linear in the answer

    # Cost controls (DESIGN.md): what is judged, answers reused, and what it costs.
    sample_rate: float = Field(default=1.0, ge=0, le=1, allow_inf_nan=False)
    trace_filter: TraceFilter | None = None
    # Per rule, named after it (``selection``): unset, a rule takes TRACE_FILTER, and its
    # sample rate is SAMPLE_RATE for the judge, 1.0 for the deterministic rules (they cost
    # nothing, and a team that set SAMPLE_RATE for the judge's bill keeps all their verdicts).
    groundedness_sample_rate: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    missing_citation_sample_rate: float | None = Field(default=None, ge=0, le=1,
                                                       allow_inf_nan=False)
    answered_without_tool_sample_rate: float | None = Field(default=None, ge=0, le=1,
                                                            allow_inf_nan=False)
    groundedness_filter: TraceFilter | None = None
    missing_citation_filter: TraceFilter | None = None
    answered_without_tool_filter: TraceFilter | None = None
    judge_cache_size: int = Field(default=10_000, ge=0)
    judge_price_input_per_million: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    judge_price_output_per_million: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    # Prompt tokens the provider's cache served (usage.prompt_tokens_details.cached_tokens);
    # unset, they are priced at the input price.
    judge_price_cached_input_per_million: float | None = Field(default=None, ge=0,
                                                               allow_inf_nan=False)
    # The fleet's judge spend per UTC day (cost/daily_budget.py), read from VERDICTS_TOPIC.
    judge_budget_usd_per_day: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    health_port: int = Field(default=8080, ge=0, le=65535)
    # Projects with a ``project`` label of their own on the metrics; the rest are ``other``.
    metrics_max_projects: int = Field(default=20, ge=0, le=1000)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "console"] = "json"
    drain_timeout_seconds: float = Field(default=45.0, gt=0)
    # Verdicts as OTel gen_ai.evaluation.result events (consumer/pipeline/delivery/events): none
    # or otlp, to the
    # endpoint of the standard OTEL_EXPORTER_OTLP_* variables, which the OTel SDK reads itself.
    verdict_events: Literal["none", "otlp"] = "none"
    # Read here only to be redacted: the SDK reads them itself, and logs a part it cannot
    # parse (``Header format invalid! ...: authorization="Bearer <key>"``) in full.
    otel_exporter_otlp_headers: SecretStr | None = None
    otel_exporter_otlp_logs_headers: SecretStr | None = None

    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = (
        "PLAINTEXT"
    )
    kafka_sasl_mechanism: (
        Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None
    ) = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_cafile: str | None = None
    # Mutual TLS: the client certificate (chain) and its key, PEM; the key's password if any.
    kafka_ssl_certfile: str | None = None
    kafka_ssl_keyfile: str | None = None
    kafka_ssl_key_password: SecretStr | None = None
    # Hostname verification is on; turning it off is logged as a warning at every start.
    kafka_ssl_check_hostname: bool = True
    # OAUTHBEARER: who issues the token. ``client_credentials`` (the OAuth 2.0 flow against
    # the token endpoint below) or ``aws_msk_iam`` (Amazon MSK IAM, AWS's signer from the
    # ``[msk]`` extra, credentials and region from the standard AWS environment).
    kafka_sasl_oauth_provider: Literal["client_credentials", "aws_msk_iam"] = "client_credentials"
    kafka_sasl_oauth_token_endpoint_url: str | None = None
    kafka_sasl_oauth_client_id: str | None = None
    kafka_sasl_oauth_client_secret: SecretStr | None = None
    kafka_sasl_oauth_scope: str | None = None
    aws_region: str | None = Field(
        default=None, validation_alias=AliasChoices("aws_region", "aws_default_region")
    )

    @field_validator("log_level", "log_format", "traces_format", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator("verdict_events", "kafka_ssl_check_hostname", "kafka_sasl_oauth_provider",
                     mode="before")
    @classmethod
    def _stripped_lower(cls, value: Any) -> Any:
        # Words in any case, as KAFKA_SECURITY_PROTOCOL and KAFKA_SASL_MECHANISM take them.
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("kafka_security_protocol", "kafka_sasl_mechanism", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("openai_base_url", "kafka_ssl_cafile", "kafka_sasl_mechanism",
                     "kafka_ssl_certfile", "kafka_ssl_keyfile", "kafka_ssl_key_password",
                     "kafka_sasl_oauth_token_endpoint_url", "kafka_sasl_oauth_client_id",
                     "kafka_sasl_oauth_client_secret", "kafka_sasl_oauth_scope", "aws_region",
                     "otlp_logs_topic", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("min_acceptable_score", mode="before")
    @classmethod
    def _blank_score_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("rules", mode="before")
    @classmethod
    def _rule_list(cls, value: Any) -> Any:
        if isinstance(value, str):  # a blank RULES is the default, as an unset one
            return parse_rules(value) if value.strip() else (GROUNDEDNESS,)
        return parse_rules(",".join(value)) if isinstance(value, list | tuple) else value

    @field_validator("trace_filter", "groundedness_filter", "missing_citation_filter",
                     "answered_without_tool_filter", mode="before")
    @classmethod
    def _jmespath(cls, value: Any) -> Any:
        if isinstance(value, str):  # blank: every trace
            if not value.strip():
                return None
            try:
                return compile_filter(value)
            except ValueError as exc:  # its message names the setting already
                raise ValueError(str(exc).removeprefix(f"{FILTER_SETTING}: ")) from None
        return value

    @field_validator("judge_price_input_per_million", "judge_price_output_per_million",
                     "groundedness_sample_rate", "missing_citation_sample_rate",
                     "answered_without_tool_sample_rate", "judge_budget_usd_per_day",
                     "judge_price_cached_input_per_million", mode="before")
    @classmethod
    def _blank_number_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("sample_rate", "judge_cache_size", "kafka_ssl_check_hostname",
                     "kafka_sasl_oauth_provider", mode="before")
    @classmethod
    def _blank_is_the_default(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():  # as a chart or compose file renders
            raise PydanticUseDefault
        return value

    @model_validator(mode="after")
    def _both_prices_or_none(self) -> Settings:
        # One price alone would give costs that look complete and are too low.
        given = (self.judge_price_input_per_million, self.judge_price_output_per_million)
        if (given[0] is None) != (given[1] is None):
            raise ValueError(
                "JUDGE_PRICE_INPUT_PER_MILLION and JUDGE_PRICE_OUTPUT_PER_MILLION go together: "
                "set both (USD per million tokens) or neither"
            )
        if self.judge_price_cached_input_per_million is not None and given[0] is None:
            raise ValueError(
                "JUDGE_PRICE_CACHED_INPUT_PER_MILLION is set without JUDGE_PRICE_INPUT_PER_MILLION "
                "and JUDGE_PRICE_OUTPUT_PER_MILLION: set those too")
        return self

    @model_validator(mode="after")
    def _budget_needs_prices(self) -> Settings:
        # Without prices no verdict carries a cost, and the budget would never be reached.
        if self.judge_budget_usd_per_day is not None and self.judge_price_input_per_million is None:
            raise ValueError(
                "JUDGE_BUDGET_USD_PER_DAY needs JUDGE_PRICE_INPUT_PER_MILLION and "
                "JUDGE_PRICE_OUTPUT_PER_MILLION: the spend is counted from each verdict's cost")
        return self

    @field_validator("citation_pattern", mode="before")
    @classmethod
    def _citation_regex(cls, value: Any) -> Any:
        if isinstance(value, str):  # blank: the default markers
            return compile_citation_pattern(value) if value.strip() else None
        return value

    @field_validator("min_acceptable_score")
    @classmethod
    def _score_in_range(cls, value: float | None) -> float | None:
        if value is None:
            return None  # required only where judging happens: see load_settings
        if math.isnan(value):
            raise ValueError("Input should be a number between 0 and 1")
        if value > 1:
            raise ValueError(SCORE_ABOVE_ONE)
        if value < 0:
            raise ValueError(SCORE_BELOW_ZERO)
        return value

    @model_validator(mode="after")
    def _sasl_complete(self) -> Settings:
        if not self.kafka_security_protocol.startswith("SASL_"):
            return self
        mechanism = self.kafka_sasl_mechanism
        if mechanism is None:
            raise ValueError(
                "KAFKA_SECURITY_PROTOCOL is SASL_*, so KAFKA_SASL_MECHANISM is required"
            )
        if mechanism != "OAUTHBEARER":
            if not (self.kafka_sasl_username and self.kafka_sasl_password):
                raise ValueError(
                    f"KAFKA_SASL_MECHANISM is {mechanism}, so KAFKA_SASL_USERNAME and "
                    "KAFKA_SASL_PASSWORD are both required"
                )
        elif self.kafka_sasl_oauth_provider == "aws_msk_iam":
            if not self.aws_region:
                raise ValueError(
                    "KAFKA_SASL_OAUTH_PROVIDER is aws_msk_iam, so AWS_REGION is required"
                )
        elif not (self.kafka_sasl_oauth_token_endpoint_url and self.kafka_sasl_oauth_client_id
                  and self.kafka_sasl_oauth_client_secret):
            raise ValueError(
                "KAFKA_SASL_MECHANISM is OAUTHBEARER, so KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL, "
                "KAFKA_SASL_OAUTH_CLIENT_ID and KAFKA_SASL_OAUTH_CLIENT_SECRET are all required"
            )
        elif problem := token_endpoint_problem(self.kafka_sasl_oauth_token_endpoint_url):
            raise ValueError(f"KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL {problem}")
        return self

    @model_validator(mode="after")
    def _client_key_with_its_certificate(self) -> Settings:
        # A key alone (or a certificate alone) cannot prove anything to the broker; a key
        # password without a key is a sign the wrong variable was set.
        if self.kafka_ssl_keyfile and not self.kafka_ssl_certfile:
            raise ValueError("KAFKA_SSL_KEYFILE is set without KAFKA_SSL_CERTFILE: set both")
        if self.kafka_ssl_key_password and not (self.kafka_ssl_keyfile or self.kafka_ssl_certfile):
            raise ValueError(
                "KAFKA_SSL_KEY_PASSWORD is set without KAFKA_SSL_KEYFILE or KAFKA_SSL_CERTFILE"
            )
        return self

    def check_kafka_security(self) -> None:
        """For the commands that connect to Kafka (``run``, ``replay``, ``load-sample``): a
        ConfigError, one line, for a TLS file or SASL setting the protocol would ignore.

        Ignored, it would leave the worker retrying a listener it cannot speak to
        ("Connection closed") forever. Not a validator: ``check`` and ``eval`` never connect,
        and a variable left in the shell must not stop them. Only what says "use TLS / SASL"
        is checked: a password or client secret alone may come with a Secret mounted whole.
        """
        try:
            self._security_settings_match_the_protocol()
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def _security_settings_match_the_protocol(self) -> None:
        protocol = self.kafka_security_protocol
        if protocol not in ("SSL", "SASL_SSL"):
            for setting, value in (("KAFKA_SSL_CAFILE", self.kafka_ssl_cafile),
                                   ("KAFKA_SSL_CERTFILE", self.kafka_ssl_certfile),
                                   ("KAFKA_SSL_KEYFILE", self.kafka_ssl_keyfile)):
                if value:
                    use = "SASL_SSL" if protocol == "SASL_PLAINTEXT" else "SSL or SASL_SSL"
                    raise ValueError(
                        f"{setting} is set but KAFKA_SECURITY_PROTOCOL is {protocol}: use {use}"
                    )
        if not protocol.startswith("SASL_"):
            provider = self.kafka_sasl_oauth_provider
            chosen_provider = None if provider == "client_credentials" else provider  # default
            for setting, value in (
                ("KAFKA_SASL_MECHANISM", self.kafka_sasl_mechanism),
                ("KAFKA_SASL_USERNAME", self.kafka_sasl_username),
                ("KAFKA_SASL_OAUTH_PROVIDER", chosen_provider),
                ("KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL", self.kafka_sasl_oauth_token_endpoint_url),
                ("KAFKA_SASL_OAUTH_CLIENT_ID", self.kafka_sasl_oauth_client_id),
                ("KAFKA_SASL_OAUTH_SCOPE", self.kafka_sasl_oauth_scope),
            ):
                if value and value.strip():
                    use = "SASL_SSL" if protocol == "SSL" else "SASL_PLAINTEXT or SASL_SSL"
                    raise ValueError(
                        f"{setting} is set but KAFKA_SECURITY_PROTOCOL is {protocol}: use {use}"
                    )

    @field_validator("kafka_bootstrap_servers")
    @classmethod
    def _host_and_port_each(cls, value: str) -> str:
        # aiokafka reads "host" as port 9092 and fails on a port that is no number with a
        # traceback; an address that cannot be right is better refused before any retrying.
        entries = [entry.strip() for entry in value.split(",")]
        for entry in entries:
            host, _, port = entry.rpartition(":")
            if not entry or not host.strip("[]") or not port.isdigit() or not (
                    0 < int(port) < 65536):
                which = "" if len(entries) == 1 else f" ({entry!r} is not)"
                raise ValueError(f"each broker must be host:port, e.g. localhost:9092 or "
                                 f"[::1]:9092, separated by commas{which}")
        return ",".join(entries)

    @model_validator(mode="after")
    def _logs_topic_beside_spans(self) -> Settings:
        topic = self.otlp_logs_topic
        if topic is None:
            return self
        if not self.traces_format.startswith("otlp_"):
            raise ValueError(
                f"OTLP_LOGS_TOPIC is set but TRACES_FORMAT is {self.traces_format}: log records "
                "join spans, so use otlp_proto or otlp_json (the logs topic's encoding too)")
        if topic == self.traces_topic:
            raise ValueError(f"OTLP_LOGS_TOPIC is TRACES_TOPIC ({topic}): the collector writes "
                             "spans and logs to topics of their own")
        if self.delivery == "exactly_once":
            raise ValueError(
                "OTLP_LOGS_TOPIC does not work with DELIVERY=exactly_once yet (a trace's two "
                "topics would commit in two transactions): use at_least_once")
        return self

    @model_validator(mode="after")
    def _max_wait_covers_quiet(self) -> Settings:
        # A trace can go quiet only after its first span: a shorter max wait would close
        # every trace by max wait and the quiet period would never be what decides.
        if self.trace_max_wait_seconds < self.trace_quiet_seconds:
            raise ValueError(
                f"TRACE_MAX_WAIT_SECONDS ({self.trace_max_wait_seconds:g}) is below "
                f"TRACE_QUIET_SECONDS ({self.trace_quiet_seconds:g}): it must be at least as long"
            )
        return self

    @model_validator(mode="after")
    def _one_request_fits_tokens_per_minute(self) -> Settings:
        # Below one request's minimum, every trace would be a ``request_too_large`` error.
        limit, model = self.judge_tokens_per_minute, self.judge_model
        if limit is not None and limit < (minimum := minimum_request_tokens(model)):
            raise ValueError(
                f"JUDGE_TOKENS_PER_MINUTE ({limit:,}) is below one request's minimum for "
                f"JUDGE_MODEL {model!r}: {minimum:,} tokens (the answer budget plus the "
                "system prompt), so every trace would be a request_too_large error"
            )
        return self

    @property
    def judging(self) -> bool:
        """True when ``groundedness`` is among the rules: the judge (its key, its threshold)
        is needed."""
        return GROUNDEDNESS in self.rules

    @property
    def threshold(self) -> float:
        """The minimum acceptable score, known to be set once the settings validated."""
        assert self.min_acceptable_score is not None  # noqa: S101 - enforced by validator
        return self.min_acceptable_score

    def selection(self, rule: str) -> Selection:
        """Which traces ``rule`` looks at: ``<RULE>_FILTER`` else ``TRACE_FILTER``, and
        ``<RULE>_SAMPLE_RATE`` else the default above; salted by the rule's name but for the
        judge, whose sample is the one ``SAMPLE_RATE`` always drew."""
        rate: float | None = getattr(self, f"{rule}_sample_rate", None)  # fields by rule name
        chosen: TraceFilter | None = getattr(self, f"{rule}_filter", None)
        if rate is None:
            rate = self.sample_rate if rule == GROUNDEDNESS else 1.0
        return Selection(rate, chosen or self.trace_filter, "" if rule == GROUNDEDNESS else rule)

    def secrets(self) -> list[str]:
        """The secret values in force, for redaction."""
        values = [self.openai_api_key, self.kafka_sasl_password, self.kafka_ssl_key_password,
                  self.kafka_sasl_oauth_client_secret]
        secrets = [v.get_secret_value() for v in values if v and v.get_secret_value()]
        for headers in (self.otel_exporter_otlp_headers, self.otel_exporter_otlp_logs_headers):
            if headers is not None:
                secrets.extend(header_secrets(headers.get_secret_value()))
        return secrets

    def require_api_key(self) -> str:
        """The judge's API key, or a ConfigError naming ``OPENAI_API_KEY``."""
        if self.openai_api_key is None or not self.openai_api_key.get_secret_value().strip():
            raise ConfigError(
                "OPENAI_API_KEY is not set: the worker will not start and consumes nothing "
                "(set it to your judge endpoint's key)"
            )
        return self.openai_api_key.get_secret_value()


def header_secrets(headers: str) -> list[str]:
    """What of an ``OTEL_EXPORTER_OTLP_*HEADERS`` value must not be logged: each ``name=value``
    part's value as written, unquoted and URL-decoded, and its last word (the key of
    ``Bearer <key>``); a part without ``=`` (a key with a comma in it, cut by the SDK's split)
    whole. Not the names: redaction also cuts a secret's long words out (``known_secrets``),
    and ``authorization`` is one. Pieces shorter than ``MIN_HEADER_SECRET_CHARS`` are left."""
    pieces = []
    for part in headers.split(","):
        value = part.split("=", 1)[1] if "=" in part else part
        for form in (value, value.strip().strip("\"'"), unquote(value).strip().strip("\"'")):
            pieces.append(form.strip())
            pieces.extend(form.split()[-1:])
    return list(dict.fromkeys(piece for piece in pieces if len(piece) >= MIN_HEADER_SECRET_CHARS))


def token_endpoint_problem(url: str) -> str | None:
    """What makes ``url`` no token endpoint, in words that never echo it (its userinfo would
    be a password): an http(s) URL with a host and no ``user:password@``. Else None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        return "is not a valid URL"
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host"
    if parts.username is not None or parts.password is not None:
        # user:password@ in the URL would reach logs with it.
        return ("must not hold credentials (user:password@): the client's go in "
                "KAFKA_SASL_OAUTH_CLIENT_ID and KAFKA_SASL_OAUTH_CLIENT_SECRET")
    return None


def load_settings(*, require_threshold: bool = True, kafka: bool = False,
                  **overrides: Any) -> Settings:
    """Read and validate the environment, raising ConfigError with one clear line per bad
    value (every one of them, so that a fix is not followed by the next refusal).

    ``require_threshold=False`` is for commands that never judge (loading sample traces);
    without ``groundedness`` in ``RULES`` nothing is judged either, and no threshold is needed.
    ``kafka=True`` is for commands that connect to Kafka: ``Settings.check_kafka_security``.
    """
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(describe(exc)) from None
    if require_threshold and settings.judging and settings.min_acceptable_score is None:
        raise ConfigError(threshold_line(SCORE_REQUIRED))
    if kafka:
        settings.check_kafka_security()
    return settings


def describe(exc: ValidationError) -> str:
    """A line per problem, each naming its variable and never a secret's value."""
    return "\n".join(dict.fromkeys(_line(error) for error in exc.errors()))


def _line(error: Any) -> str:
    field = str(error["loc"][0]) if error["loc"] else ""
    message = str(error["msg"]).removeprefix("Value error, ")
    if message in {SCORE_ABOVE_ONE, SCORE_BELOW_ZERO}:
        return threshold_line(message, error.get("input"))
    if not field:
        return message
    shown = "" if field in SECRET_FIELDS or "input" not in error else f" (got {error['input']!r})"
    return f"{field.upper()}: {message}{shown}"


def threshold_line(sentence: str, value: Any = None) -> str:
    """A threshold error: the contract's exact sentence, then the variable that sets it."""
    if value is None:
        return f"{sentence} Set MIN_ACCEPTABLE_SCORE to a number from 0 to 1."
    return f"{sentence} (MIN_ACCEPTABLE_SCORE is {value!r})"


# Variables set in the environment that are not the worker's but read like one of them.
_OWN_PREFIXES = ("KAFKA_", "JUDGE_", "TRACE", "OPENAI_", "MIN_", "MAX_", "DLQ_", "VERDICT",
                 "CONSUMER_", "SAMPLE_", "RULES", "CITATION_", "OTLP_", "HEALTH_", "LOG_",
                 "DELIVERY", "DRAIN_", "METRICS_", "AWS_", "GROUNDEDNES", "MISSING_",
                 "ANSWERED_")


def lookalike_variables(environ: Mapping[str, str]) -> list[str]:
    """A warning for each variable set that is not the worker's but is a near miss of one
    (``KAFKA_BOOTSTRAP_SERVER``): the worker would silently use the default instead."""
    known = {name.upper() for name in Settings.model_fields}
    for field in Settings.model_fields.values():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            known |= {str(choice).upper() for choice in alias.choices}
    found = []
    for name in sorted(environ):
        upper = name.upper()
        if upper in known or not upper.startswith(_OWN_PREFIXES):
            continue
        close = difflib.get_close_matches(upper, known, n=1, cutoff=0.85)
        if close:
            found.append(f"{name} is not a setting of the worker: did you mean {close[0]}?")
    return found
