"""OAUTHBEARER's client-credentials token provider, against a real token endpoint on loopback.

``TokenEndpoint`` is a real HTTP server (a thread) that checks the client's id and secret
(HTTP Basic) and the form, and issues numbered tokens with a short ``expires_in``. Time is
the provider's injected clock, moved by hand: no test waits for a token to expire.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest
import structlog
from aiokafka import AIOKafkaConsumer

from consumer.errors import ConfigError
from consumer.settings import Settings
from consumer.stream.clients import client_options, start_once
from consumer.stream.kafka_errors import Refuse, Retry, map_kafka_error
from consumer.stream.oauth import (
    ClientCredentialsTokenProvider,
    OAuthTokenRefused,
    OAuthTokenUnavailable,
    jwt_lifetime,
)
from tests.support.ports import free_port

CLIENT_ID = "groundedness-worker"
CLIENT_SECRET = "oauth-Client-Secret-61"
LIFETIME_S = 10


class TokenEndpoint:
    """An OAuth 2.0 token endpoint: client credentials only; ``status`` other than 200 is
    answered with an RFC 6749 error body."""

    def __init__(self) -> None:
        self.status = 200
        self.token_prefix = "token-"
        self.expires_in: Any = LIFETIME_S
        self.requests: list[dict[str, list[str]]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = parse_qs(self.rfile.read(length).decode())
                endpoint.requests.append(form)
                expected = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
                if endpoint.status != 200:
                    self._answer(endpoint.status, {"error": "temporarily_unavailable"})
                elif self.headers.get("Authorization") != f"Basic {expected}":
                    self._answer(401, {"error": "invalid_client",
                                       "error_description": "echoing " + str(form)})
                elif form.get("grant_type") != ["client_credentials"]:
                    self._answer(400, {"error": "unsupported_grant_type"})
                else:
                    token = f"{endpoint.token_prefix}{len(endpoint.requests)}"
                    body: dict[str, Any] = {"access_token": token, "token_type": "Bearer"}
                    if endpoint.expires_in is not None:
                        body["expires_in"] = endpoint.expires_in
                    self._answer(200, body)

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/oauth/token"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def endpoint() -> Iterator[TokenEndpoint]:
    server = TokenEndpoint()
    yield server
    server.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def provider_for(endpoint: TokenEndpoint, clock: Clock, secret: str = CLIENT_SECRET,
                 scope: str | None = "kafka") -> ClientCredentialsTokenProvider:
    return ClientCredentialsTokenProvider(endpoint.url, CLIENT_ID, secret, scope, clock=clock)


async def test_the_token_is_cached_then_refreshed_before_it_expires(
    endpoint: TokenEndpoint,
) -> None:
    clock = Clock()
    provider = provider_for(endpoint, clock)
    assert await provider.token() == "token-1"
    assert endpoint.requests[0] == {"grant_type": ["client_credentials"], "scope": ["kafka"]}
    clock.now += 0.79 * LIFETIME_S
    assert await provider.token() == "token-1", "not yet due: the cached token"
    clock.now += 0.02 * LIFETIME_S  # past 80% of its lifetime, before its expiry
    assert await provider.token() == "token-2"
    assert len(endpoint.requests) == 2


async def test_concurrent_callers_share_one_fetch(endpoint: TokenEndpoint) -> None:
    provider = provider_for(endpoint, Clock())
    tokens = await asyncio.gather(*(provider.token() for _ in range(20)))
    assert set(tokens) == {"token-1"}
    assert len(endpoint.requests) == 1


async def test_a_failed_refresh_serves_the_valid_token_then_never_an_expired_one(
    endpoint: TokenEndpoint,
) -> None:
    clock = Clock()
    provider = provider_for(endpoint, clock)
    await provider.token()
    endpoint.status = 503
    clock.now += 0.9 * LIFETIME_S
    with structlog.testing.capture_logs() as logs:
        assert await provider.token() == "token-1", "still valid: served while the issuer is down"
        assert await provider.token() == "token-1", "the retry is not due yet: no new request"
    assert len(endpoint.requests) == 2
    assert [log["event"] for log in logs] == ["kafka_oauth_refresh_failed"]
    assert logs[0]["error"] == "answered HTTP 503"
    assert logs[0]["retry_in_s"] == 1.0
    clock.now += 0.11 * LIFETIME_S  # expired
    with pytest.raises(OAuthTokenUnavailable) as unavailable:
        await provider.token()
    assert isinstance(map_kafka_error(unavailable.value), Retry), "unreachable while running"
    endpoint.status = 200
    clock.now += 60
    assert await provider.token() == "token-4", "the issuer is back: a fresh token"


async def test_a_refusal_after_expiry_is_a_configuration_error(endpoint: TokenEndpoint) -> None:
    clock = Clock()
    provider = provider_for(endpoint, clock)
    await provider.token()
    endpoint.status = 401  # the secret was revoked
    clock.now += LIFETIME_S + 1
    with pytest.raises(OAuthTokenRefused) as refused:
        await provider.token()
    assert isinstance(map_kafka_error(refused.value), Refuse)


@pytest.mark.parametrize(
    ("expires_in", "lifetime_s"), [(None, 60), ("30", 30)], ids=["absent", "string"])
async def test_a_token_without_a_usable_expires_in_still_expires(
    endpoint: TokenEndpoint, expires_in: Any, lifetime_s: float,
) -> None:
    endpoint.expires_in = expires_in
    clock = Clock()
    provider = provider_for(endpoint, clock)
    await provider.token()
    clock.now += 0.81 * lifetime_s
    assert await provider.token() == "token-2"


def test_a_jwt_says_its_own_lifetime() -> None:
    payload = base64.urlsafe_b64encode(json.dumps({"exp": 1300}).encode()).decode().rstrip("=")
    assert jwt_lifetime(f"h.{payload}.s", 1000.0) == 300
    assert jwt_lifetime("opaque-token", 1000.0) is None


# -- at start: one line, exit code 2, never the secret -------------------------------------------


async def start_with(url: str, secret: str = CLIENT_SECRET) -> Retry | None:
    """``start_once`` on a real consumer configured for OAUTHBEARER (no broker is reached:
    the first token is fetched before any connection)."""
    settings = Settings(
        kafka_bootstrap_servers=f"127.0.0.1:{free_port()}",
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_mechanism="OAUTHBEARER", kafka_sasl_oauth_token_endpoint_url=url,
        kafka_sasl_oauth_client_id=CLIENT_ID, kafka_sasl_oauth_client_secret=secret)
    consumer = AIOKafkaConsumer(**client_options(settings, "oauth-test"))
    try:
        return await start_once(consumer)
    finally:
        await consumer.stop()


async def test_a_refused_client_is_one_line_at_start(endpoint: TokenEndpoint) -> None:
    wrong = "wrong-Secret-77"
    with pytest.raises(ConfigError) as refused:
        await start_with(endpoint.url, wrong)
    message = str(refused.value)
    assert message == (
        f"kafka_oauth_failed: the token endpoint {endpoint.url}: refused the client: HTTP 401 "
        "invalid_client (check KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL, KAFKA_SASL_OAUTH_CLIENT_ID, "
        "KAFKA_SASL_OAUTH_CLIENT_SECRET and KAFKA_SASL_OAUTH_SCOPE)")
    assert wrong not in message
    assert "echoing" not in message


async def test_an_unreachable_endpoint_is_one_line_at_start() -> None:
    url = f"http://127.0.0.1:{free_port()}/token"
    with pytest.raises(ConfigError) as refused:
        await start_with(url)
    message = str(refused.value)
    assert message.startswith(f"kafka_oauth_failed: the token endpoint {url}: unreachable (")
    assert "\n" not in message
    assert CLIENT_SECRET not in message


async def test_with_a_token_start_goes_on_to_the_broker(endpoint: TokenEndpoint) -> None:
    # Nothing listens on the bootstrap port: once the token is there, it is "unreachable".
    assert isinstance(await start_with(endpoint.url), Retry)
    assert len(endpoint.requests) == 1
