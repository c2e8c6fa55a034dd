"""OAUTHBEARER tokens for the Kafka clients: one provider per process, shared by every client.

aiokafka asks its ``sasl_oauth_token_provider`` for a token each time it opens a connection.
``CachedTokenProvider`` holds the token and says when to fetch a new one; the issuers are
``ClientCredentialsTokenProvider`` (OAuth 2.0 client credentials, ``KAFKA_SASL_OAUTH_*``)
and ``consumer.kafka.auth.msk_iam.MskIamTokenProvider`` (Amazon MSK IAM, the ``[msk]`` extra).

The policy, from what a user meets:

- At start (no token yet) any failure, refused or unreachable, is ``OAuthTokenRefused``;
  ``kafka_errors`` makes it one ``kafka_oauth_failed`` line and exit code 2.
- Once 80% of a token's lifetime has gone, the next connection asking for it gets it still
  and starts a refresh in the background: only a connection with no valid token left waits.
  Every caller shares one fetch in flight. A token is never served past its expiry.
- A failed fetch is logged once (``kafka_oauth_refresh_failed``, never a secret) and the next
  attempt waits 1 s, doubling to 30 s, whether or not the token has expired: meanwhile a
  caller without a valid token fails at once, without a request to the issuer. That failure
  is ``OAuthTokenUnavailable`` (a connection error, retried by aiokafka and ``start_client``)
  when the issuer did not answer, answered 5xx, 408, 425 or 429 (its Retry-After, seconds or
  an HTTP date, is the least wait) or answered 200 without a token (a proxy's page);
  ``OAuthTokenRefused`` when it refused the client (a revoked secret, any other 4xx):
  aiokafka swallows that one in its background connections, so the provider also tells its
  ``on_refused_while_running`` listeners, and the worker stops with that one line and exit
  code 2. Connections already authenticated stay up until the broker closes them.
- Messages name the token endpoint without the URL's userinfo or query.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import binascii
import datetime
import email.utils
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote_plus, urlsplit, urlunsplit

import httpx
import structlog
from aiokafka.abc import AbstractTokenProvider
from aiokafka.errors import KafkaConnectionError, KafkaError, SaslAuthenticationFailed

log = structlog.get_logger(__name__)

REFRESH_AT = 0.8  # of the token's lifetime
# A token is not handed out in its last seconds: the issuer's `exp` is whole seconds from when
# it signed (before the answer reached us), and the broker closes the connection at that `exp`.
EXPIRY_MARGIN_S = 2.0
DEFAULT_LIFETIME_S = 60.0  # a token with neither expires_in nor a JWT exp
MIN_LIFETIME_S, MAX_LIFETIME_S = 1.0, 1e7  # outside: not a lifetime to trust
FIRST_RETRY_S = 1.0
MAX_RETRY_S = 30.0
TOKEN_TIMEOUT_S = 10.0
# Timeout, too early, rate limited: the issuer will answer later, the client is not refused.
TRANSIENT_STATUSES = frozenset({408, 425, 429})
MAX_RETRY_AFTER_S = 3600.0  # a longer Retry-After is not waited for whole
_MAX_DETAIL_CHARS = 200
CLIENT_CREDENTIALS_REJECTED_HINT = (
    "the token endpoint's issuer, audience or signing key is not the one the broker validates "
    "(check KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL and KAFKA_SASL_OAUTH_SCOPE; the broker's log "
    "says which claim it refused)")


class OAuthTokenRefused(KafkaError):  # type: ignore[misc]
    """No token: at start, or the issuer refused the client. A configuration error."""


class OAuthTokenRejected(SaslAuthenticationFailed):  # type: ignore[misc]
    """The broker refused the token the issuer granted (its RFC 7628 error status is the
    message): signed by a key, or for an issuer or audience, the broker does not accept.
    ``rejected_hint``: the provider's, what to check (None: a client-credentials one)."""

    def __init__(self, status: str, *, rejected_hint: str | None = None) -> None:
        super().__init__(status)
        self.rejected_hint = rejected_hint


class OAuthTokenUnavailable(KafkaConnectionError):  # type: ignore[misc]
    """No valid token while running and the issuer did not answer: retried."""


class TokenFetchError(Exception):
    """One failed fetch; ``refused``: the issuer answered no (wrong client, secret, scope);
    ``retry_after_s``: the least wait it asked for (HTTP Retry-After), if any."""

    def __init__(self, message: str, *, refused: bool,
                 retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.refused = refused
        self.retry_after_s = retry_after_s


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
        """When it stops being handed out: its lifetime less the margin (a tenth of a short one)."""
        return self.fetched_at + self.lifetime_s - min(EXPIRY_MARGIN_S, self.lifetime_s / 10)


class CachedTokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """The refresh policy above, for any issuer: subclasses say how to fetch one token."""

    #: what the one-line errors call the issuer, and the settings to check
    issuer = "the token issuer"
    hint = ""
    #: what to check when the broker refuses a token this issuer granted
    rejected_hint = "the broker does not accept the token issuer's tokens"

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._token: Token | None = None
        self._retry_at = 0.0
        self._retry_s = FIRST_RETRY_S
        self._last_failure: TokenFetchError | None = None
        # The one fetch in flight, on the loop that runs it (the provider outlives loops in
        # tests; a task belongs to one).
        self._fetching: tuple[asyncio.AbstractEventLoop, asyncio.Task[None]] | None = None
        self._refusal_listeners: list[Callable[[OAuthTokenRefused], None]] = []
        #: the refusal that ended a running client's tokens (None until then)
        self.refused_while_running: OAuthTokenRefused | None = None

    @abc.abstractmethod
    async def fetch(self) -> tuple[str, float]:
        """A new token and its lifetime in seconds; ``TokenFetchError`` when none."""

    def on_refused_while_running(
        self, listener: Callable[[OAuthTokenRefused], None]
    ) -> Callable[[], None]:
        """Call ``listener`` when the issuer refuses the client once the token has expired
        (a revoked secret: aiokafka swallows the connection's error, so the worker listens
        here to stop); returns what removes it."""
        self._refusal_listeners.append(listener)
        return lambda: self._refusal_listeners.remove(listener)

    async def token(self) -> str:
        """A token valid now. Past 80% of its lifetime it is still served while one fetch
        runs in the background; without a valid token, callers wait for that one fetch, or
        fail at once while the next attempt is not due."""
        now, current = self._clock(), self._token
        valid = current is not None and now < current.expires_at
        if current is not None and valid and now < current.refresh_at:
            return current.value
        fetching = self._fetch_in_flight() or self._start_fetch_if_due(now)
        if current is not None and valid:
            return current.value
        if fetching is not None:
            await asyncio.shield(fetching)  # one caller cancelled must not cancel the fetch
            now, current = self._clock(), self._token
            if current is not None and now < current.expires_at:
                return current.value
        raise self._no_token()

    async def fetched(self) -> None:
        """Wait for the fetch in flight, if any (what a background refresh did is then in
        place: for tests, and for a caller that wants the fresh token)."""
        if (fetching := self._fetch_in_flight()) is not None:
            await asyncio.shield(fetching)

    def _fetch_in_flight(self) -> asyncio.Task[None] | None:
        if self._fetching is None:
            return None
        loop, task = self._fetching
        if task.done() or loop is not asyncio.get_running_loop():
            return None
        return task

    def _start_fetch_if_due(self, now: float) -> asyncio.Task[None] | None:
        if now < self._retry_at:
            return None  # the last attempt failed and the next is not due
        task = asyncio.get_running_loop().create_task(self._fetch_once())
        self._fetching = (asyncio.get_running_loop(), task)
        return task

    async def _fetch_once(self) -> None:
        started, refreshed = self._clock(), self._token is not None
        try:
            value, lifetime_s = await self.fetch()
        except TokenFetchError as exc:
            self._failed(exc)
            return
        except Exception as exc:  # in a background task: nobody else would see it
            self._failed(TokenFetchError(f"failed ({type(exc).__name__})", refused=False))
            return
        if not usable_lifetime(lifetime_s):  # any issuer: an absurd lifetime is not trusted
            lifetime_s = DEFAULT_LIFETIME_S
        self._token = Token(value, started, lifetime_s)
        self._retry_at, self._retry_s, self._last_failure = 0.0, FIRST_RETRY_S, None
        self.refused_while_running = None
        # Once per token (every 80% of its lifetime at most): how long a refresh takes.
        log.info("kafka_oauth_token", took_ms=round((self._clock() - started) * 1000, 1),
                 lifetime_s=round(lifetime_s, 1), refreshed=refreshed)

    def _failed(self, exc: TokenFetchError) -> None:
        """One failed attempt: logged once (not once per caller), the next one put off."""
        now, current = self._clock(), self._token
        self._last_failure = exc
        retry_in_s = max(self._retry_s, exc.retry_after_s or 0.0)
        self._retry_at = now + retry_in_s
        self._retry_s = min(self._retry_s * 2, MAX_RETRY_S)
        if current is None:
            return  # no token yet: the caller's error says it (at start, one line, exit 2)
        log.warning("kafka_oauth_refresh_failed", error=str(exc),
                    token_valid_for_s=round(max(current.expires_at - now, 0.0), 1),
                    retry_in_s=retry_in_s)

    def _no_token(self) -> KafkaError:
        """Why there is no valid token: the last attempt's failure."""
        failure = self._last_failure or TokenFetchError("no token", refused=False)
        line = f"{self.issuer}: {failure}{self.hint}"
        if self._token is None:
            return OAuthTokenRefused(line)  # at start: refused or unreachable, one line
        if not failure.refused:
            return OAuthTokenUnavailable(line)
        refused = OAuthTokenRefused(line)
        if self.refused_while_running is None:
            self.refused_while_running = refused
            for listener in list(self._refusal_listeners):
                listener(refused)
        return refused


class ClientCredentialsTokenProvider(CachedTokenProvider):
    """OAuth 2.0 client credentials (RFC 6749 4.4): the client id and secret in HTTP Basic
    authentication, as most issuers (Keycloak, Okta, Entra ID, Confluent Cloud) accept."""

    hint = (" (check KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL, KAFKA_SASL_OAUTH_CLIENT_ID, "
            "KAFKA_SASL_OAUTH_CLIENT_SECRET and KAFKA_SASL_OAUTH_SCOPE)")
    rejected_hint = CLIENT_CREDENTIALS_REJECTED_HINT

    def __init__(self, endpoint_url: str, client_id: str, client_secret: str,
                 scope: str | None = None, *, timeout_s: float = TOKEN_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock=clock)
        self.endpoint_url = endpoint_url
        self.shown_url = shown_url(endpoint_url)
        self.issuer = f"the token endpoint {self.shown_url}"
        # RFC 6749 2.3.1: each form-urlencoded, then HTTP Basic (a secret with "+", "%" or
        # "/", an id with ":", would otherwise reach the issuer as another one).
        self._auth = (quote_plus(client_id), quote_plus(client_secret))
        self._scope = scope
        self._timeout_s = timeout_s

    async def fetch(self) -> tuple[str, float]:
        form = {"grant_type": "client_credentials"}
        if self._scope:
            form["scope"] = self._scope
        try:
            # httpx's timeout bounds each read: an endpoint trickling its answer a byte at a
            # time would hold a connection's token far longer. This bounds the whole POST.
            async with asyncio.timeout(self._timeout_s), httpx.AsyncClient(
                    timeout=self._timeout_s, trust_env=False) as http:
                response = await http.post(self.endpoint_url, data=form, auth=self._auth,
                                           headers={"Accept": "application/json"})
        except TimeoutError:
            raise TokenFetchError(f"unreachable (no answer within {self._timeout_s:g} s)",
                                  refused=False) from None
        except httpx.HTTPError as exc:
            # The exception's text may name the URL, never the form or the header; the URL's
            # credentials and query are left out of every message.
            detail = _without(str(exc), self.endpoint_url, self.shown_url)
            raise TokenFetchError(f"unreachable ({type(exc).__name__}: {detail})"[
                :_MAX_DETAIL_CHARS], refused=False) from None
        status = response.status_code
        if status >= 500 or status in TRANSIENT_STATUSES:
            raise TokenFetchError(f"answered HTTP {status}", refused=False,
                                  retry_after_s=retry_after_s(response))
        if 300 <= status < 400:
            raise TokenFetchError(f"redirected (not followed): HTTP {status}", refused=True)
        if status != 200:
            raise TokenFetchError(
                f"refused the client: HTTP {status} {_oauth_error(response)}".rstrip(),
                refused=True)
        return _parse_token(response)


def _without(text: str, url: str, shown: str) -> str:
    """``text`` with ``url`` as ``shown``, and no trace left of its userinfo or query."""
    text = text.replace(url, shown)
    try:
        parts = urlsplit(url)
        secrets = [parts.password, parts.query]
    except ValueError:
        secrets = []
    for secret in secrets:
        if secret and len(secret) >= 3:  # shorter: it would mangle the text, not hide much
            text = text.replace(secret, "***")
    return text


def retry_after_s(response: httpx.Response) -> float | None:
    """The answer's Retry-After (RFC 9110 10.2.3: seconds or an HTTP date) in seconds from
    now, capped at ``MAX_RETRY_AFTER_S``; None when absent or unreadable."""
    value = response.headers.get("Retry-After", "").strip()
    if not value:
        return None
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # HTTP dates are GMT
            when = when.replace(tzinfo=datetime.UTC)
        seconds = (when - datetime.datetime.now(datetime.UTC)).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


UNSHOWN_URL = "(the configured URL)"


def shown_url(url: str) -> str:
    """``url`` as messages show it: without its userinfo (credentials) and query. Not an
    http(s) URL with a host (``user:pw@host/token``, ``https:\\\\user:pw@host``): a neutral
    text, since what looks like a scheme or a path there may be the credentials."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return UNSHOWN_URL
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return UNSHOWN_URL
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


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
        # A proxy's or captive portal's page, not the issuer refusing the client: retried
        # while running (at start, no token is one line and exit 2 all the same).
        raise TokenFetchError("answered 200 without an access_token", refused=False)
    expires_in = body.get("expires_in") if isinstance(body, dict) else None
    return value, token_lifetime(expires_in, value, time.time())


def token_lifetime(expires_in: object, token: str, now_epoch_s: float) -> float:
    """``expires_in`` if usable, else the JWT's ``exp``, else ``DEFAULT_LIFETIME_S``. Usable:
    a finite number of seconds in [1, 10**7] (NaN, 0, negative or 10**400 say nothing)."""
    if isinstance(expires_in, str):
        try:
            expires_in = float(expires_in)
        except ValueError:
            expires_in = None
    for lifetime in (expires_in, jwt_lifetime(token, now_epoch_s)):
        if usable_lifetime(lifetime):
            return float(lifetime)  # type: ignore[arg-type]
    return DEFAULT_LIFETIME_S


def usable_lifetime(lifetime: object) -> bool:
    """A finite number of seconds in [1, 10**7] (an int too large for a float is not)."""
    if isinstance(lifetime, bool) or not isinstance(lifetime, int | float):
        return False
    try:
        seconds = float(lifetime)
    except OverflowError:
        return False
    return math.isfinite(seconds) and MIN_LIFETIME_S <= seconds <= MAX_LIFETIME_S


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
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    try:
        return float(exp) - now_epoch_s
    except OverflowError:
        return None
