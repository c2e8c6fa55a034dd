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
from consumer.kafka.auth.oauth import (
    CLIENT_CREDENTIALS_REJECTED_HINT,
    OAuthTokenRefused,
    OAuthTokenRejected,
)

AUTH_ERRORS = (SaslAuthenticationFailed, AuthenticationFailedError, UnsupportedSaslMechanismError)
_MAX_REASON_CHARS = 400
_TLS_HINT = "check KAFKA_SECURITY_PROTOCOL and KAFKA_SSL_CAFILE"
_CLIENT_CERT_HINT = "check KAFKA_SSL_CERTFILE and KAFKA_SSL_KEYFILE"

# The broker's certificate failed our verification: OpenSSL's X509_V_ERR_* codes.
_UNKNOWN_CA = {2, 18, 19, 20, 21}  # no issuer in KAFKA_SSL_CAFILE, self-signed, ...
_EXPIRED = {9: "is not valid yet", 10: "has expired"}
_NAME_MISMATCH = {62, 64}  # host name, IP address

# The broker refused ours: the TLS alert it sent, as OpenSSL names it. Not SSLEOFError & co.:
# a dropped link is transient.
_CLIENT_CERT_REQUIRED = {"TLSV13_ALERT_CERTIFICATE_REQUIRED", "SSLV3_ALERT_HANDSHAKE_FAILURE"}
_CLIENT_CERT_REFUSED = {
    "SSLV3_ALERT_BAD_CERTIFICATE", "TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_CERTIFICATE_EXPIRED",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN", "TLSV1_ALERT_ACCESS_DENIED", "TLSV1_ALERT_DECRYPT_ERROR",
    "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE", "SSLV3_ALERT_CERTIFICATE_REVOKED",
}
_NOT_TLS = {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"}


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
    cause: str | None = None  # why the first server could not be reached, when aiokafka said

    @property
    def reason(self) -> str:
        """Why no server answered: the first one's failure (``host:port: error``), else what
        the client said (aiokafka's text names the error class)."""
        return self.cause or str(self.error)


@dataclass(frozen=True, slots=True)
class Propagate:
    """Not a connection failure this map knows: raise it as it is."""


KafkaAction = Refuse | Retry | Propagate


def map_kafka_error(error: BaseException, where: str = "") -> KafkaAction:
    """What to do about ``error``, met while connecting to ``where`` (``host:port``)."""
    if isinstance(error, OAuthTokenRejected):  # before AUTH_ERRORS: a subclass, other hints
        broker = f"the broker {where}" if where else "the broker"
        return Refuse(
            f"kafka_oauth_failed: {broker} refused the OAuth token "
            f"({error.args[0] if error.args else 'invalid_token'}): "
            f"{error.rejected_hint or CLIENT_CREDENTIALS_REJECTED_HINT}"
        )
    if isinstance(error, AUTH_ERRORS):
        reason = f"the broker {where} refused the credentials: {error}"[:_MAX_REASON_CHARS]
        return Refuse(
            f"kafka_auth_failed: {reason} (check KAFKA_SASL_MECHANISM, "
            "KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD)"
        )
    if isinstance(error, OAuthTokenRefused):  # its text names the issuer and the settings
        return Refuse(f"kafka_oauth_failed: {error.args[0] if error.args else error}"
                      [:_MAX_REASON_CHARS * 2])
    if (tls := tls_failure(error, where)) is not None:
        return Refuse(f"kafka_tls_failed: {tls}")
    if isinstance(error, KafkaConnectionError):
        return Retry(error)
    return Propagate()


def tls_failure(error: BaseException, where: str) -> str | None:
    """The TLS handshake's verdict in ``error`` or its causes (aiokafka wraps a failed read in
    ``KafkaConnectionError``), as one line with what to check; None if TLS is not the cause."""
    cause = _ssl_cause(error)
    broker = f"the broker {where}" if where else "the broker"
    if isinstance(cause, ssl.SSLCertVerificationError):
        code = getattr(cause, "verify_code", None)  # set by OpenSSL, absent if built by hand
        if code in _UNKNOWN_CA:
            why = f"{broker}'s certificate is not signed by a trusted CA (unknown CA)"
            hint = "check KAFKA_SSL_CAFILE: it must hold the CA that signed the broker's"
        elif code in _EXPIRED:
            why, hint = f"{broker}'s certificate {_EXPIRED[code]}", "renew it on the broker"
        elif code in _NAME_MISMATCH:
            why = f"{broker}'s certificate does not name that host (hostname mismatch)"
            hint = ("check KAFKA_BOOTSTRAP_SERVERS against the names in the broker's "
                    "certificate; KAFKA_SSL_CHECK_HOSTNAME=false turns the check off")
        else:
            why, hint = (f"{broker} failed TLS verification: "
                        f"{getattr(cause, 'verify_message', None) or cause}"), _TLS_HINT
        return f"{why} ({hint})"[:_MAX_REASON_CHARS]
    if not isinstance(cause, ssl.SSLError):
        return None
    reason = str(getattr(cause, "reason", None) or "")
    if reason in _CLIENT_CERT_REQUIRED:
        return f"{broker} requires a client certificate ({_CLIENT_CERT_HINT})"
    if reason in _CLIENT_CERT_REFUSED:
        return (f"{broker} refused the client certificate ({reason}; {_CLIENT_CERT_HINT}, "
                "and that the broker trusts their CA)")
    if reason in _NOT_TLS:
        return (f"{broker} did not answer in TLS ({reason}; check KAFKA_SECURITY_PROTOCOL "
                "and the listener's port)")
    return None


def _ssl_cause(error: BaseException) -> ssl.SSLError | None:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
