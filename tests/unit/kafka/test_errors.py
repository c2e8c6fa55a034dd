"""The Kafka failure map: which errors are configuration (exit 2), which are transient."""

from __future__ import annotations

import ssl

import pytest
from aiokafka.errors import (
    AuthenticationFailedError,
    KafkaConnectionError,
    KafkaTimeoutError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from consumer.errors import ConfigError
from consumer.kafka.errors import Propagate, Refuse, Retry, map_kafka_error


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(SaslAuthenticationFailed("Invalid username or password"), id="sasl"),
        pytest.param(AuthenticationFailedError("bad"), id="authentication"),
        pytest.param(UnsupportedSaslMechanismError("SCRAM-SHA-1"), id="mechanism"),
    ],
)
def test_a_refused_login_is_a_configuration_error(error: Exception) -> None:
    action = map_kafka_error(error, "broker-1:9094")
    assert isinstance(action, Refuse)
    assert action.message.startswith(
        f"kafka_auth_failed: the broker broker-1:9094 refused the credentials: {error}")
    assert action.message.endswith(
        "(check KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD)")
    assert isinstance(action.error(), ConfigError)
    assert str(action.error()) == action.message


def test_an_untrusted_certificate_is_a_configuration_error() -> None:
    error = ssl.SSLCertVerificationError(1, "certificate verify failed: self-signed")
    action = map_kafka_error(error, "broker-1:9093")
    assert isinstance(action, Refuse)
    assert action.message.startswith("kafka_tls_failed: the broker broker-1:9093 failed TLS")
    assert "KAFKA_SSL_CAFILE" in action.message


def test_an_unreachable_broker_is_retried() -> None:
    error = KafkaConnectionError("Unable to bootstrap from [...]")
    action = map_kafka_error(error)
    assert isinstance(action, Retry)
    assert action.error is error  # raised again as it is where a caller retries on its own
    assert action.reason == "KafkaConnectionError: Unable to bootstrap from [...]"


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(ssl.SSLEOFError(8, "EOF occurred in violation of protocol"), id="tls-eof"),
        pytest.param(KafkaTimeoutError(), id="timeout"),
        pytest.param(ValueError("not kafka"), id="foreign"),
    ],
)
def test_anything_else_propagates(error: Exception) -> None:
    assert map_kafka_error(error, "broker-1:9092") == Propagate()


def test_a_long_reason_is_cut_but_keeps_its_advice() -> None:
    action = map_kafka_error(SaslAuthenticationFailed("x" * 2000), "broker-1:9094")
    assert isinstance(action, Refuse)
    assert len(action.message) < 520
    assert action.message.endswith("KAFKA_SASL_PASSWORD)")
