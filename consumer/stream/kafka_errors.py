"""The one map from aiokafka's failures to what the worker does about them.

As httpx maps httpcore's exceptions in one place, ``map_kafka_error`` says, for an error met
while a Kafka client connects, which of three things to do; it returns the action, never
flags for the caller to combine:

- ``Refuse``: a configuration error (the broker refused our credentials or SASL mechanism, or
  its certificate failed verification). The broker will answer the same next time, so it is
  never retried: one line on stderr, exit code 2 (``ConfigError``).
- ``Retry``: transient (no broker answered). The worker backs off and starts the client
  again; a one-shot command (replay, load-sample) says it cannot reach the broker.
- ``Propagate``: anything else; it is raised as it is.

aiokafka's ``start()`` raises the same ``KafkaConnectionError`` for each of these, with the
cause only in its log records (``aiokafka_compat.connection_failures`` catches it there), so
the map is applied to the logged cause when there is one, else to what ``start()`` raised.
Failures after start-up (a fenced transactional producer, a commit the broker refused) are
handled where they occur: ``transactional.py``, ``pipeline.py``.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from aiokafka.errors import (
    AuthenticationFailedError,
    KafkaConnectionError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from consumer.errors import ConfigError

AUTH_ERRORS = (SaslAuthenticationFailed, AuthenticationFailedError, UnsupportedSaslMechanismError)
TLS_ERRORS = (ssl.SSLCertVerificationError,)  # not SSLEOFError & co.: a dropped link is transient
_MAX_REASON_CHARS = 400


@dataclass(frozen=True, slots=True)
class Refuse:
    """Configuration: never retried; the message is the one line the user sees (exit 2)."""

    message: str

    def error(self) -> ConfigError:
        """The ConfigError that says it."""
        return ConfigError(self.message)


@dataclass(frozen=True, slots=True)
class Retry:
    """Transient: back off and start the client again."""

    error: KafkaConnectionError

    @property
    def reason(self) -> str:
        """What the client said (aiokafka's text names the error class)."""
        return str(self.error)


@dataclass(frozen=True, slots=True)
class Propagate:
    """Not a connection failure this map knows: raise it as it is."""


KafkaAction = Refuse | Retry | Propagate


def map_kafka_error(error: BaseException, where: str = "") -> KafkaAction:
    """What to do about ``error``, met while connecting to ``where`` (``host:port``)."""
    if isinstance(error, AUTH_ERRORS):
        reason = f"the broker {where} refused the credentials: {error}"[:_MAX_REASON_CHARS]
        return Refuse(
            f"kafka_auth_failed: {reason} (check KAFKA_SASL_MECHANISM, "
            "KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD)"
        )
    if isinstance(error, TLS_ERRORS):
        reason = f"the broker {where} failed TLS verification: {error}"[:_MAX_REASON_CHARS]
        return Refuse(
            f"kafka_tls_failed: {reason} (check KAFKA_SECURITY_PROTOCOL and KAFKA_SSL_CAFILE)"
        )
    if isinstance(error, KafkaConnectionError):
        return Retry(error)
    return Propagate()
