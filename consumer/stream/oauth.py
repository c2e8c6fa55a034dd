"""OAUTHBEARER tokens for the Kafka clients: one provider per process, shared by every client.

aiokafka asks its ``sasl_oauth_token_provider`` for a token each time it opens a connection.
``CachedTokenProvider`` holds the token and says when to fetch a new one; the issuers are
``ClientCredentialsTokenProvider`` (OAuth 2.0 client credentials, ``KAFKA_SASL_OAUTH_*``)
and ``consumer.stream.msk_iam.MskIamTokenProvider`` (Amazon MSK IAM, the ``[msk]`` extra).

The policy, from what a user meets:

- At start (no token yet) any failure, refused or unreachable, is ``OAuthTokenRefused``;
  ``kafka_errors`` makes it one ``kafka_oauth_failed`` line and exit code 2.
- A token is refreshed once 80% of its lifetime has gone, when a connection asks for it;
  concurrent callers share one fetch. It is never served past its expiry.
- While running, a failed refresh is logged (``kafka_oauth_refresh_failed``, never a secret)
  and the still-valid token is served; the next attempt waits 1 s, doubling to 30 s. Once it
  has expired and the endpoint still fails, a connection asking for a token fails:
  ``OAuthTokenUnavailable`` (a connection error, retried by aiokafka and by ``start_client``)
  when the endpoint is unreachable, ``OAuthTokenRefused`` when it refuses the client (a
  revoked secret: a client started then stops the worker with exit code 2). Connections
  already authenticated stay up until the broker closes them.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import binascii
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import structlog
from aiokafka.abc import AbstractTokenProvider
from aiokafka.errors import KafkaConnectionError, KafkaError, SaslAuthenticationFailed

log = structlog.get_logger(__name__)

REFRESH_AT = 0.8  # of the token's lifetime
DEFAULT_LIFETIME_S = 60.0  # a token with neither expires_in nor a JWT exp
FIRST_RETRY_S = 1.0
MAX_RETRY_S = 30.0
TOKEN_TIMEOUT_S = 10.0
_MAX_DETAIL_CHARS = 200


class OAuthTokenRefused(KafkaError):  # type: ignore[misc]
    """No token: at start, or the issuer refused the client. A configuration error."""


class OAuthTokenRejected(SaslAuthenticationFailed):  # type: ignore[misc]
    """The broker refused the token the issuer granted (its RFC 7628 error status is the
    message): signed by a key, or for an issuer or audience, the broker does not accept."""


class OAuthTokenUnavailable(KafkaConnectionError):  # type: ignore[misc]
    """No valid token while running and the issuer did not answer: retried."""


class TokenFetchError(Exception):
    """One failed fetch; ``refused``: the issuer answered no (wrong client, secret, scope)."""

    def __init__(self, message: str, *, refused: bool) -> None:
        super().__init__(message)
        self.refused = refused


@dataclass(frozen=True, slots=True)
class Token:
    """A token and when it was fetched (the provider's clock), with its lifetime."""

    value: str
    fetched_at: float
    lifetime_s: float

    @property
    def refresh_at(self) -> float:
        return self.fetched_at + REFRESH_AT * self.lifetime_s

    @property
    def expires_at(self) -> float:
        return self.fetched_at + self.lifetime_s


class CachedTokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """The refresh policy above, for any issuer: subclasses say how to fetch one token."""

    #: what the one-line errors call the issuer, and the settings to check
    issuer = "the token issuer"
    hint = ""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._token: Token | None = None
        self._retry_at = 0.0
        self._retry_s = FIRST_RETRY_S
        self._locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}

    @abc.abstractmethod
    async def fetch(self) -> tuple[str, float]:
        """A new token and its lifetime in seconds; ``TokenFetchError`` when none."""

    async def token(self) -> str:
        """A token valid now, fetching a new one if due (callers meanwhile wait for it)."""
        current = self._token
        if current is not None and self._clock() < current.refresh_at:
            return current.value
        async with self._lock():
            return await self._token_or_refresh()

    async def _token_or_refresh(self) -> str:
        now, current = self._clock(), self._token
        if current is not None and (
            now < current.refresh_at or (now < current.expires_at and now < self._retry_at)
        ):
            return current.value  # fetched by the caller before us, or a retry is not due
        started = now
        try:
            value, lifetime_s = await self.fetch()
        except TokenFetchError as exc:
            return self._failed(exc, current)
        self._token = Token(value, started, max(lifetime_s, 1.0))
        self._retry_s = FIRST_RETRY_S
        # Once per token (every 80% of its lifetime at most): how long a refresh takes.
        log.info("kafka_oauth_token", took_ms=round((self._clock() - started) * 1000, 1),
                 lifetime_s=round(lifetime_s, 1), refreshed=current is not None)
        return value

    def _failed(self, exc: TokenFetchError, current: Token | None) -> str:
        line = f"{self.issuer}: {exc}{self.hint}"
        if current is None:
            raise OAuthTokenRefused(line)
        now = self._clock()
        self._retry_at = now + self._retry_s
        self._retry_s = min(self._retry_s * 2, MAX_RETRY_S)
        valid_for_s = current.expires_at - now
        log.warning("kafka_oauth_refresh_failed", error=str(exc),
                    token_valid_for_s=round(max(valid_for_s, 0.0), 1),
                    retry_in_s=self._retry_at - now)
        if valid_for_s > 0:
            return current.value
        if exc.refused:
            raise OAuthTokenRefused(line)
        raise OAuthTokenUnavailable(line)

    def _lock(self) -> asyncio.Lock:
        # One lock per event loop: a lock is bound to the loop that first waits on it.
        loop = asyncio.get_running_loop()
        return self._locks.setdefault(loop, asyncio.Lock())


class ClientCredentialsTokenProvider(CachedTokenProvider):
    """OAuth 2.0 client credentials (RFC 6749 4.4): the client id and secret in HTTP Basic
    authentication, as most issuers (Keycloak, Okta, Entra ID, Confluent Cloud) accept."""

    hint = (" (check KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL, KAFKA_SASL_OAUTH_CLIENT_ID, "
            "KAFKA_SASL_OAUTH_CLIENT_SECRET and KAFKA_SASL_OAUTH_SCOPE)")

    def __init__(self, endpoint_url: str, client_id: str, client_secret: str,
                 scope: str | None = None, *, timeout_s: float = TOKEN_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock=clock)
        self.endpoint_url = endpoint_url
        self.issuer = f"the token endpoint {endpoint_url}"
        self._auth = (client_id, client_secret)
        self._scope = scope
        self._timeout_s = timeout_s

    async def fetch(self) -> tuple[str, float]:
        form = {"grant_type": "client_credentials"}
        if self._scope:
            form["scope"] = self._scope
        try:
            async with httpx.AsyncClient(timeout=self._timeout_s, trust_env=False) as http:
                response = await http.post(self.endpoint_url, data=form, auth=self._auth,
                                           headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            # The exception's text names the URL at most, never the form or the header.
            raise TokenFetchError(f"unreachable ({type(exc).__name__}: {exc})"[
                :_MAX_DETAIL_CHARS], refused=False) from None
        if response.status_code >= 500:
            raise TokenFetchError(f"answered HTTP {response.status_code}", refused=False)
        if response.status_code != 200:
            raise TokenFetchError(
                f"refused the client: HTTP {response.status_code} {_oauth_error(response)}"
                .rstrip(), refused=True)
        return _parse_token(response)


def _oauth_error(response: httpx.Response) -> str:
    """The RFC 6749 ``error`` code (``invalid_client``...), never ``error_description``:
    some issuers echo the request there."""
    try:
        body = response.json()
    except ValueError:
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    return str(error)[:60] if isinstance(error, str) else ""


def _parse_token(response: httpx.Response) -> tuple[str, float]:
    try:
        body = response.json()
    except ValueError:
        body = None
    value = body.get("access_token") if isinstance(body, dict) else None
    if not isinstance(value, str) or not value:
        raise TokenFetchError("answered 200 without an access_token", refused=True)
    expires_in = body.get("expires_in") if isinstance(body, dict) else None
    if isinstance(expires_in, int | float | str):
        try:
            return value, float(expires_in)
        except ValueError:
            pass
    return value, jwt_lifetime(value, time.time()) or DEFAULT_LIFETIME_S


def jwt_lifetime(token: str, now_epoch_s: float) -> float | None:
    """Seconds until a JWT's ``exp`` (read, not verified: the broker verifies), else None."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) - now_epoch_s if isinstance(exp, int | float) else None
