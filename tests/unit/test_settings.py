"""Configuration: the contract's names and defaults, and one clear line for bad values."""

from __future__ import annotations

import re

import pytest

from consumer.cli import main
from consumer.cost.rule_selection import Selection
from consumer.errors import ConfigError
from consumer.judge.prompt import MAX_ANSWER_TOKENS, SYSTEM_PROMPT, estimate_tokens
from consumer.judge.request_shape import REASONING_ANSWER_TOKENS
from consumer.settings import load_settings, lookalike_variables

PER_RULE_VARIABLES = tuple(f"{rule}_{control}" for rule in (
    "GROUNDEDNESS", "MISSING_CITATION", "ANSWERED_WITHOUT_TOOL") for control in (
    "SAMPLE_RATE", "FILTER"))
COST_VARIABLES = ("SAMPLE_RATE", "TRACE_FILTER", "JUDGE_CACHE_SIZE",
                  "JUDGE_PRICE_INPUT_PER_MILLION", "JUDGE_PRICE_OUTPUT_PER_MILLION",
                  *PER_RULE_VARIABLES)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MIN_ACCEPTABLE_SCORE", "OPENAI_API_KEY", "OPENAI_BASE_URL", "DELIVERY",
                 "JUDGE_MAX_CONCURRENCY", "KAFKA_SECURITY_PROTOCOL", "KAFKA_SASL_PASSWORD",
                 "KAFKA_BOOTSTRAP_SERVERS", "TRACES_TOPIC", "VERDICTS_TOPIC", "DLQ_TOPIC",
                 "CONSUMER_GROUP", "JUDGE_MODEL", "HEALTH_PORT", "LOG_LEVEL", "LOG_FORMAT",
                 "JUDGE_TOKENS_PER_MINUTE", "TRACES_FORMAT", "TRACE_QUIET_SECONDS",
                 "TRACE_MAX_WAIT_SECONDS", "MAX_OPEN_TRACES", "RULES", "CITATION_PATTERN",
                 *COST_VARIABLES):
        monkeypatch.delenv(name, raising=False)


def test_defaults_are_the_contracts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    settings = load_settings()
    assert settings.kafka_bootstrap_servers == "localhost:9092"
    assert (settings.traces_topic, settings.verdicts_topic, settings.dlq_topic) == (
        "llm-traces", "groundedness-verdicts", "groundedness-dlq")
    assert settings.consumer_group == "groundedness-worker"
    assert settings.delivery == "at_least_once"
    assert settings.judge_model == "gpt-4o-mini"
    assert settings.judge_timeout_seconds == 30
    assert settings.judge_max_concurrency == 16
    assert (settings.max_documents, settings.max_document_chars, settings.max_output_chars) == (
        12, 2000, 4000)
    assert settings.context_field == "retrieved_documents"
    assert settings.health_port == 8080
    assert (settings.log_level, settings.log_format) == ("info", "json")
    assert settings.traces_format == "trace_json"
    assert (settings.trace_quiet_seconds, settings.trace_max_wait_seconds) == (10, 120)
    assert settings.max_open_traces == 10_000
    assert (settings.rules, settings.citation_pattern) == (("groundedness",), None)
    assert (settings.sample_rate, settings.trace_filter, settings.judge_cache_size) == (
        1.0, None, 10_000)
    assert (settings.judge_price_input_per_million,
            settings.judge_price_output_per_million) == (None, None)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({"TRACES_FORMAT": "otlp_proto"}, ("otlp_proto", 10, 120, 10_000),
                     id="proto"),
        pytest.param({"TRACES_FORMAT": "OTLP_JSON", "MAX_OPEN_TRACES": "1"},
                     ("otlp_json", 10, 120, 1), id="json-upper-case-one-open-trace"),
        pytest.param({"TRACE_QUIET_SECONDS": "2.5", "TRACE_MAX_WAIT_SECONDS": "2.5"},
                     ("trace_json", 2.5, 2.5, 10_000), id="max-wait-equal-to-quiet"),
    ],
)
def test_telemetry_settings_are_read(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
    expected: tuple[str, float, float, int],
) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert (settings.traces_format, settings.trace_quiet_seconds,
            settings.trace_max_wait_seconds, settings.max_open_traces) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(None, "Minimum acceptable score is required. Set MIN_ACCEPTABLE_SCORE to "
                     "a number from 0 to 1.", id="missing"),
        pytest.param("", "Minimum acceptable score is required. Set MIN_ACCEPTABLE_SCORE to a "
                     "number from 0 to 1.", id="empty"),
        pytest.param("1.01", "Minimum acceptable score cannot exceed 1. (MIN_ACCEPTABLE_SCORE "
                     "is '1.01')", id="above-one"),
        pytest.param("-0.5", "Minimum acceptable score cannot be below 0. (MIN_ACCEPTABLE_SCORE "
                     "is '-0.5')", id="below-zero"),
    ],
)
def test_threshold_messages_word_for_word(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str | None,
    message: str,
) -> None:
    if value is not None:
        monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", value)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings()
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert err == message + "\n"


@pytest.mark.parametrize("value", ["0", "1", "0.75"])
def test_threshold_bounds_are_inclusive(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", value)
    assert load_settings().threshold == float(value)


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        pytest.param("JUDGE_MAX_CONCURRENCY", "many", "JUDGE_MAX_CONCURRENCY", id="not-int"),
        pytest.param("JUDGE_MAX_CONCURRENCY", "0", "JUDGE_MAX_CONCURRENCY", id="zero"),
        pytest.param("DELIVERY", "twice", "DELIVERY", id="delivery"),
        pytest.param("CONTEXT_FIELD", "metadata", "CONTEXT_FIELD", id="context-field"),
        pytest.param("JUDGE_TIMEOUT_SECONDS", "-1", "JUDGE_TIMEOUT_SECONDS", id="timeout"),
        pytest.param("KAFKA_SECURITY_PROTOCOL", "SASL_SSL", "KAFKA_SASL_MECHANISM",
                     id="sasl-incomplete"),
        pytest.param("TRACES_FORMAT", "zipkin", "TRACES_FORMAT", id="traces-format"),
        pytest.param("TRACE_QUIET_SECONDS", "0", "TRACE_QUIET_SECONDS", id="quiet-zero"),
        pytest.param("TRACE_QUIET_SECONDS", "-3", "TRACE_QUIET_SECONDS", id="quiet-negative"),
        pytest.param("TRACE_QUIET_SECONDS", "nan", "TRACE_QUIET_SECONDS", id="quiet-nan"),
        pytest.param("TRACE_QUIET_SECONDS", "soon", "TRACE_QUIET_SECONDS", id="quiet-not-number"),
        pytest.param("TRACE_MAX_WAIT_SECONDS", "inf", "TRACE_MAX_WAIT_SECONDS",
                     id="max-wait-infinite"),
        pytest.param("TRACE_MAX_WAIT_SECONDS", "9.5", "below TRACE_QUIET_SECONDS",
                     id="max-wait-below-quiet"),
        pytest.param("MAX_OPEN_TRACES", "0", "MAX_OPEN_TRACES", id="open-traces-zero"),
        pytest.param("MAX_OPEN_TRACES", "1.5", "MAX_OPEN_TRACES", id="open-traces-fraction"),
        pytest.param("RULES", "groundedness,hallucination",
                     "RULES: unknown rule 'hallucination'; the known rules are groundedness, "
                     "missing_citation, answered_without_tool", id="rules-unknown"),
        pytest.param("RULES", " , ,", "RULES: names no rule", id="rules-only-commas"),
        pytest.param("CITATION_PATTERN", "[unclosed", "CITATION_PATTERN: not a regular "
                     "expression", id="citation-pattern-not-regex"),
        pytest.param("CITATION_PATTERN", r"\[?", "CITATION_PATTERN: matches an empty string",
                     id="citation-pattern-matches-nothing"),
    ],
)
def test_bad_values_give_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, value: str,
    fragment: str,
) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv(name, value)
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert fragment in err
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_secret_values_are_never_echoed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "hunter2-very-secret")
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    assert main(["run"]) == 2
    assert "hunter2" not in capsys.readouterr().err
    settings = load_settings(kafka_security_protocol="PLAINTEXT")
    assert "hunter2" not in repr(settings)


@pytest.mark.parametrize(
    ("value", "rules"),
    [
        pytest.param("missing_citation", ("missing_citation",), id="one"),
        pytest.param(" Answered_Without_Tool , groundedness,answered_without_tool,",
                     ("answered_without_tool", "groundedness"), id="case-spaces-duplicates"),
        pytest.param("", ("groundedness",), id="blank-is-the-default"),
    ],
)
def test_rules_are_read_in_order_each_once(
    monkeypatch: pytest.MonkeyPatch, value: str, rules: tuple[str, ...]
) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv("RULES", value)
    assert load_settings().rules == rules


def test_a_citation_pattern_replaces_the_default_markers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RULES", "missing_citation")
    monkeypatch.setenv("CITATION_PATTERN", r"\{\{cite:[^}]+\}\}")
    pattern = load_settings().citation_pattern
    assert pattern is not None
    assert pattern.search("as the handbook says {{cite:kb-17}}")
    monkeypatch.setenv("CITATION_PATTERN", "  ")
    assert load_settings().citation_pattern is None


def test_without_groundedness_no_key_and_no_threshold_are_needed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RULES", "missing_citation,answered_without_tool")
    settings = load_settings()
    assert not settings.judging
    assert settings.min_acceptable_score is None
    monkeypatch.setenv("RULES", "missing_citation,groundedness")
    with pytest.raises(ConfigError, match="Minimum acceptable score is required"):
        load_settings()


def test_no_api_key_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    # A broker address nobody listens on: refusing must happen before any connection.
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert "OPENAI_API_KEY" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("model", "tokens_per_minute", "minimum"),
    [
        pytest.param("gpt-4o-mini", "300", MAX_ANSWER_TOKENS, id="chat-model"),
        pytest.param("o3-mini", "2000", REASONING_ANSWER_TOKENS, id="reasoning-model"),
    ],
)
def test_tokens_per_minute_below_one_requests_minimum_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], model: str,
    tokens_per_minute: str, minimum: int,
) -> None:
    """Below one request's minimum (answer budget + system prompt), every trace would be a
    ``request_too_large`` error: refused at start instead, naming the minimum."""
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv("JUDGE_MODEL", model)
    monkeypatch.setenv("JUDGE_TOKENS_PER_MINUTE", tokens_per_minute)
    needed = minimum + estimate_tokens(SYSTEM_PROMPT)
    with pytest.raises(ConfigError, match="JUDGE_TOKENS_PER_MINUTE"):
        load_settings()
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert f"{needed:,}" in err
    assert model in err
    assert err.count("\n") == 1
    monkeypatch.setenv("JUDGE_TOKENS_PER_MINUTE", str(needed))
    assert load_settings().judge_tokens_per_minute == needed


# -- cost controls ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "line"),
    [
        pytest.param({"SAMPLE_RATE": "1.5"},
                     "SAMPLE_RATE: Input should be less than or equal to 1 (got '1.5')",
                     id="rate-above-one"),
        pytest.param({"SAMPLE_RATE": "-0.1"},
                     "SAMPLE_RATE: Input should be greater than or equal to 0 (got '-0.1')",
                     id="rate-below-zero"),
        pytest.param({"SAMPLE_RATE": "nan"},
                     "SAMPLE_RATE: Input should be a finite number (got 'nan')", id="rate-nan"),
        pytest.param({"SAMPLE_RATE": "30%"},
                     "SAMPLE_RATE: Input should be a valid number, unable to parse string as a "
                     "number (got '30%')", id="rate-percent"),
        pytest.param({"TRACE_FILTER": "project_id == "},
                     "TRACE_FILTER: syntax error at position 14: the expression ends too soon "
                     "(got 'project_id == ')", id="filter-cut-short"),
        pytest.param({"TRACE_FILTER": "project_id = 'checkout'"},
                     "TRACE_FILTER: syntax error at position 11: unknown token '=' "
                     "(got \"project_id = 'checkout'\")", id="filter-single-equals"),
        pytest.param({"TRACE_FILTER": "metadata.'environment"},
                     "TRACE_FILTER: syntax error at position 9: unclosed ' delimiter "
                     "(got \"metadata.'environment\")", id="filter-unclosed-quote"),
        pytest.param({"TRACE_FILTER": "lenght(retrieved_documents) > `0`"},
                     "TRACE_FILTER: unknown function lenght() at position 0 "
                     "(got 'lenght(retrieved_documents) > `0`')", id="filter-unknown-function"),
        pytest.param({"TRACE_FILTER": "project_id == 'a' && length(a, b)"},
                     "TRACE_FILTER: length() takes 1 argument(s), 2 given, at position 21 "
                     "(got \"project_id == 'a' && length(a, b)\")", id="filter-arity"),
        pytest.param({"JUDGE_CACHE_SIZE": "-1"},
                     "JUDGE_CACHE_SIZE: Input should be greater than or equal to 0 (got '-1')",
                     id="cache-negative"),
        pytest.param({"JUDGE_CACHE_SIZE": "1e4"},
                     "JUDGE_CACHE_SIZE: Input should be a valid integer, unable to parse string "
                     "as an integer (got '1e4')", id="cache-not-an-integer"),
        pytest.param({"JUDGE_PRICE_INPUT_PER_MILLION": "0.15"},
                     "JUDGE_PRICE_INPUT_PER_MILLION and JUDGE_PRICE_OUTPUT_PER_MILLION go "
                     "together: set both (USD per million tokens) or neither",
                     id="input-price-alone"),
        pytest.param({"JUDGE_PRICE_OUTPUT_PER_MILLION": "0.60",
                      "JUDGE_PRICE_INPUT_PER_MILLION": "  "},
                     "JUDGE_PRICE_INPUT_PER_MILLION and JUDGE_PRICE_OUTPUT_PER_MILLION go "
                     "together: set both (USD per million tokens) or neither",
                     id="output-price-with-a-blank-input-price"),
        pytest.param({"JUDGE_PRICE_INPUT_PER_MILLION": "-0.15",
                      "JUDGE_PRICE_OUTPUT_PER_MILLION": "0.60"},
                     "JUDGE_PRICE_INPUT_PER_MILLION: Input should be greater than or equal to 0 "
                     "(got '-0.15')", id="negative-price"),
        pytest.param({"JUDGE_PRICE_INPUT_PER_MILLION": "0.15",
                      "JUDGE_PRICE_OUTPUT_PER_MILLION": "inf"},
                     "JUDGE_PRICE_OUTPUT_PER_MILLION: Input should be a finite number "
                     "(got 'inf')", id="infinite-price"),
    ],
)
def test_bad_cost_controls_are_refused_in_the_documented_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], env: dict[str, str],
    line: str,
) -> None:
    """The lines docs/configuration.md quotes, word for word: one line, exit 2, before any
    broker is reached (the address below answers nothing)."""
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["run"]) == 2
    assert capsys.readouterr().err == line + "\n"


def test_cost_controls_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv("SAMPLE_RATE", "0.3")
    monkeypatch.setenv("TRACE_FILTER", "metadata.environment == 'production'")
    monkeypatch.setenv("JUDGE_CACHE_SIZE", "0")  # off
    monkeypatch.setenv("JUDGE_PRICE_INPUT_PER_MILLION", "0.15")
    monkeypatch.setenv("JUDGE_PRICE_OUTPUT_PER_MILLION", "0")  # a free answer is a price too
    settings = load_settings()
    assert (settings.sample_rate, settings.judge_cache_size) == (0.3, 0)
    assert settings.trace_filter is not None
    assert settings.trace_filter.expression == "metadata.environment == 'production'"
    assert (settings.judge_price_input_per_million,
            settings.judge_price_output_per_million) == (0.15, 0.0)


def test_each_rule_takes_its_own_selection_else_the_defaults(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """SAMPLE_RATE is the judge's default, 1.0 the deterministic rules' (they cost nothing);
    TRACE_FILTER every rule's; the judge's sample unsalted, as SAMPLE_RATE always drew it."""
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv("SAMPLE_RATE", "0.3")
    monkeypatch.setenv("TRACE_FILTER", "project_id == 'support'")
    settings = load_settings()
    every = settings.trace_filter
    assert settings.selection("groundedness") == Selection(0.3, every, "")
    assert settings.selection("missing_citation") == Selection(1.0, every, "missing_citation")
    monkeypatch.setenv("MISSING_CITATION_SAMPLE_RATE", "0.1")
    monkeypatch.setenv("MISSING_CITATION_FILTER", "metadata.environment == 'production'")
    monkeypatch.setenv("GROUNDEDNESS_SAMPLE_RATE", " 0.05 ")
    monkeypatch.setenv("ANSWERED_WITHOUT_TOOL_FILTER", " ")  # blank: the default
    settings = load_settings()
    chosen = settings.selection("missing_citation")
    assert (chosen.rate, chosen.salt) == (0.1, "missing_citation")
    assert chosen.trace_filter is not None
    assert chosen.trace_filter.expression == "metadata.environment == 'production'"
    assert settings.selection("groundedness").rate == 0.05
    assert settings.selection("answered_without_tool").trace_filter is settings.trace_filter


@pytest.mark.parametrize(("name", "value", "says"), [
    ("MISSING_CITATION_SAMPLE_RATE", "1.5", "MISSING_CITATION_SAMPLE_RATE"),
    ("GROUNDEDNESS_SAMPLE_RATE", "nan", "GROUNDEDNESS_SAMPLE_RATE"),
    ("ANSWERED_WITHOUT_TOOL_FILTER", "length(", "ANSWERED_WITHOUT_TOOL_FILTER"),
])
def test_a_bad_rule_selection_is_refused_naming_its_variable(
        monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=says):
        load_settings()


@pytest.mark.parametrize("name", COST_VARIABLES)
@pytest.mark.parametrize("blank", ["", "   "], ids=["empty", "spaces"])
def test_a_blank_cost_control_is_unset(
    monkeypatch: pytest.MonkeyPatch, name: str, blank: str
) -> None:
    """A chart or compose file that passes ``${SAMPLE_RATE:-}`` through gets the default, as
    for RULES and CITATION_PATTERN, not a refusal to start."""
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv(name, blank)
    settings = load_settings()
    assert (settings.sample_rate, settings.trace_filter, settings.judge_cache_size) == (
        1.0, None, 10_000)
    assert (settings.judge_price_input_per_million,
            settings.judge_price_output_per_million) == (None, None)


@pytest.mark.parametrize("written", [" false ", "FALSE", "False\n"])
def test_hostname_verification_off_is_read_however_it_is_written(
    written: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KAFKA_SSL_CHECK_HOSTNAME", written)
    assert load_settings(require_threshold=False).kafka_ssl_check_hostname is False


@pytest.mark.parametrize("written", ["AWS_MSK_IAM", " Aws_Msk_Iam "])
def test_the_oauth_provider_takes_any_case_as_the_mechanism_does(
    written: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    settings = load_settings(require_threshold=False, kafka_security_protocol="sasl_ssl",
                             kafka_sasl_mechanism="OAuthBearer",
                             kafka_sasl_oauth_provider=written)
    assert settings.kafka_sasl_oauth_provider == "aws_msk_iam"


@pytest.mark.parametrize(("env", "message"), [
    ({"TRACES_FORMAT": "trace_json"}, "OTLP_LOGS_TOPIC is set but TRACES_FORMAT is trace_json"),
    ({"TRACES_FORMAT": "otlp_proto", "TRACES_TOPIC": "otlp_logs"},
     "OTLP_LOGS_TOPIC is TRACES_TOPIC"),
    ({"TRACES_FORMAT": "otlp_json", "DELIVERY": "exactly_once"},
     "does not work with DELIVERY=exactly_once"),
])
def test_a_logs_topic_that_cannot_join_spans_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str,
) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv("OTLP_LOGS_TOPIC", "otlp_logs")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=message) as refused:
        load_settings()
    assert "\n" not in str(refused.value)


def test_a_logs_topic_beside_otlp_spans_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv("TRACES_FORMAT", "otlp_proto")
    monkeypatch.setenv("OTLP_LOGS_TOPIC", "otlp_logs")
    assert load_settings().otlp_logs_topic == "otlp_logs"


def test_a_blank_logs_topic_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv("OTLP_LOGS_TOPIC", " ")
    assert load_settings().otlp_logs_topic is None


@pytest.mark.parametrize(("value", "got"), [
    ("localhost:abc", "'localhost:abc'"), ("nonsense", "'nonsense'"), ("", "''"),
    ("broker:99999", "'broker:99999'"), ("a:1,,b:2", "('' is not)"), (":9092", "':9092'"),
])
def test_a_bootstrap_address_that_cannot_be_right_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str, got: str,
) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", value)
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("KAFKA_BOOTSTRAP_SERVERS: each broker must be host:port")
    assert got in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("value", ["localhost:9092", " a:1 , b:2 ", "[::1]:9092",
                                   "broker-0.kafka.svc:9093"])
def test_good_bootstrap_addresses_are_taken(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "0.5")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", value)
    assert load_settings().kafka_bootstrap_servers == ",".join(p.strip() for p in value.split(","))


def test_every_bad_value_is_reported_at_once_a_line_each(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MIN_ACCEPTABLE_SCORE", "2")
    monkeypatch.setenv("SAMPLE_RATE", "7")
    monkeypatch.setenv("RULES", "foo")
    assert main(["run"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith("Minimum acceptable score cannot exceed 1.")
    assert any(line.startswith("SAMPLE_RATE: ") for line in lines)
    assert any(line.startswith("RULES: unknown rule 'foo'") for line in lines)


def test_a_variable_that_reads_like_a_setting_is_named_with_the_one_it_misses() -> None:
    found = lookalike_variables({
        "KAFKA_BOOTSTRAP_SERVER": "broker:9092", "JUDGE_MODELL": "gpt-4o",
        "KAFKA_BOOTSTRAP_SERVERS": "ok:9092", "PATH": "/usr/bin", "KAFKA_HOME": "/opt/kafka",
        "AWS_DEFAULT_REGION": "eu-west-1", "TRACES_TOPC": "x",
    })
    assert found == [
        "JUDGE_MODELL is not a setting of the worker: did you mean JUDGE_MODEL?",
        "KAFKA_BOOTSTRAP_SERVER is not a setting of the worker: did you mean "
        "KAFKA_BOOTSTRAP_SERVERS?",
        "TRACES_TOPC is not a setting of the worker: did you mean TRACES_TOPIC?",
    ]
