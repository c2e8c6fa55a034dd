"""OAUTHBEARER's client-credentials token provider, against a real token endpoint on loopback.

``TokenEndpoint`` is a real HTTP server (a thread) that checks the client's id and secret
(HTTP Basic) and the form, and issues numbered tokens with a short ``expires_in``. Time is
the provider's injected clock, moved by hand: no test waits for a token to expire.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import email.utils
import json
from typing import Any

import httpx
import pytest
import structlog
from aiokafka import AIOKafkaConsumer

from consumer.errors import ConfigError
from consumer.kafka.auth.oauth import (
    DEFAULT_LIFETIME_S,
    EXPIRY_MARGIN_S,
    ClientCredentialsTokenProvider,
    OAuthTokenRefused,
    OAuthTokenUnavailable,
    jwt_lifetime,
    retry_after_s,
    token_lifetime,
)
from consumer.kafka.clients import client_options, start_once
from consumer.kafka.errors import Refuse, Retry, map_kafka_error
from consumer.settings import Settings
from tests.support.ports import free_port
from tests.support.token_endpoint import (
    CLIENT_ID,
    CLIENT_SECRET,
    LIFETIME_S,
    TokenEndpoint,
    endpoint,
)

__all__ = ["endpoint"]  # the fixture


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def provider_for(endpoint: TokenEndpoint, clock: Clock, secret: str = CLIENT_SECRET,
                 scope: str | None = "kafka") -> ClientCredentialsTokenProvider:
    return ClientCredentialsTokenProvider(endpoint.url, CLIENT_ID, secret, scope, clock=clock)


async def running_provider(
    endpoint: TokenEndpoint,
) -> tuple[Clock, ClientCredentialsTokenProvider, list[OAuthTokenRefused]]:
    """A provider holding its first token, and what it told the worker (as ``run`` listens)."""
    clock = Clock()
    provider = provider_for(endpoint, clock)
    await provider.token()
    told: list[OAuthTokenRefused] = []
    provider.on_refused_while_running(told.append)
    return clock, provider, told


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
    assert await provider.token() == "token-1", "still valid: served while it is refreshed"
    await provider.fetched()
    assert await provider.token() == "token-2"
    assert len(endpoint.requests) == 2


async def test_a_token_is_not_handed_out_in_its_last_seconds(endpoint: TokenEndpoint) -> None:
    # The issuer's `exp` is whole seconds from when it signed, before its answer arrived: a
    # token handed out in its last moments reaches a broker that already closes it.
    clock = Clock()
    provider = provider_for(endpoint, clock)
    await provider.token()
    endpoint.answering.clear()  # the refresh hangs: only the old token could be served
    clock.now += LIFETIME_S - EXPIRY_MARGIN_S + 0.1
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(provider.token(), 0.5)  # a guard, not a timing: it waits
    endpoint.answering.set()
    assert await provider.token() == "token-2"


async def test_a_slow_refresh_does_not_hold_the_connection_while_the_token_is_valid(
    endpoint: TokenEndpoint,
) -> None:
    clock = Clock()
    provider = provider_for(endpoint, clock)
    await provider.token()
    endpoint.answering.clear()  # the issuer holds every answer until told
    clock.now += 0.9 * LIFETIME_S
    # A guard against a hang, not a timing: the endpoint answers nothing until released.
    tokens = await asyncio.wait_for(
        asyncio.gather(*(provider.token() for _ in range(5))), 10)
    assert tokens == ["token-1"] * 5, "served at once, the refresh in the background"
    endpoint.answering.set()
    await provider.fetched()
    assert len(endpoint.requests) == 2, "one refresh for the five callers"
    assert await provider.token() == "token-2"


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
        await provider.fetched()
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


async def test_an_expired_token_and_a_failing_issuer_cost_one_request_per_retry(
    endpoint: TokenEndpoint,
) -> None:
    """Every connection aiokafka opens asks for a token: once it has expired and the issuer
    fails, they share one request, then fail at once until the retry is due (1 s doubling)."""
    clock = Clock()
    provider = provider_for(endpoint, clock)
    await provider.token()
    endpoint.status = 500
    clock.now += LIFETIME_S + 1  # expired: nobody asked while it was being refreshed
    requests_at: list[int] = []
    with structlog.testing.capture_logs() as logs:
        for _ in range(6):  # six retries, each tried by ten connections at the same instant
            failures = await asyncio.gather(*(provider.token() for _ in range(10)),
                                            return_exceptions=True)
            assert all(isinstance(f, OAuthTokenUnavailable) for f in failures), failures
            requests_at.append(len(endpoint.requests))
            again = await asyncio.gather(*(provider.token() for _ in range(10)),
                                         return_exceptions=True)
            assert all(isinstance(f, OAuthTokenUnavailable) for f in again)
            assert len(endpoint.requests) == requests_at[-1], "waiting: no request"
            clock.now += logs[-1]["retry_in_s"]
    assert requests_at == [2, 3, 4, 5, 6, 7], "one request per retry, whoever asks"
    assert [log["retry_in_s"] for log in logs] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    assert [log["event"] for log in logs] == ["kafka_oauth_refresh_failed"] * 6


async def test_concurrent_callers_without_a_valid_token_share_one_fetch(
    endpoint: TokenEndpoint,
) -> None:
    clock = Clock()
    provider = provider_for(endpoint, clock)
    await provider.token()
    clock.now += LIFETIME_S + 1
    tokens = await asyncio.gather(*(provider.token() for _ in range(10)))
    assert tokens == ["token-2"] * 10
    assert len(endpoint.requests) == 2


async def test_a_refusal_after_expiry_is_a_configuration_error(endpoint: TokenEndpoint) -> None:
    clock, provider, told = await running_provider(endpoint)
    endpoint.status = 401  # the secret was revoked
    clock.now += LIFETIME_S + 1
    with pytest.raises(OAuthTokenRefused) as refused:
        await provider.token()
    with pytest.raises(OAuthTokenRefused):
        await provider.token()  # the retry is not due: the same refusal, no request
    assert len(endpoint.requests) == 2
    assert told == [refused.value], "the worker is told once, to stop"
    assert provider.refused_while_running is refused.value
    action = map_kafka_error(refused.value)
    assert isinstance(action, Refuse)
    assert action.message == (
        f"kafka_oauth_failed: the token endpoint {endpoint.url}: refused the client: HTTP 401 "
        "invalid_client (check KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL, KAFKA_SASL_OAUTH_CLIENT_ID, "
        "KAFKA_SASL_OAUTH_CLIENT_SECRET and KAFKA_SASL_OAUTH_SCOPE)")


async def test_a_refusal_while_the_token_is_valid_is_only_logged(
    endpoint: TokenEndpoint,
) -> None:
    clock, provider, told = await running_provider(endpoint)
    endpoint.status = 401
    clock.now += 0.85 * LIFETIME_S
    assert await provider.token() == "token-1"
    await provider.fetched()
    endpoint.status = 200  # fixed before the token expired
    clock.now += 1
    assert await provider.token() == "token-1"
    await provider.fetched()
    assert await provider.token() == "token-3"
    assert told == []


@pytest.mark.parametrize("status", [408, 425, 429])
async def test_a_rate_limit_after_expiry_is_retried_after_its_retry_after(
    endpoint: TokenEndpoint, status: int,
) -> None:
    clock, provider, told = await running_provider(endpoint)
    endpoint.status, endpoint.retry_after = status, "5"
    clock.now += LIFETIME_S + 1
    with pytest.raises(OAuthTokenUnavailable) as unavailable:
        await provider.token()
    assert isinstance(map_kafka_error(unavailable.value), Retry)
    assert f"answered HTTP {status}" in str(unavailable.value)
    endpoint.status = 200
    clock.now += 4  # past the first 1 s back-off, not past Retry-After
    with pytest.raises(OAuthTokenUnavailable):
        await provider.token()
    assert len(endpoint.requests) == 2, "no request before the issuer's Retry-After"
    clock.now += 1.5
    assert await provider.token() == "token-3"
    assert told == [], "a rate limit does not stop the worker"
    assert provider.refused_while_running is None


async def test_a_page_instead_of_a_token_while_running_is_retried(
    endpoint: TokenEndpoint,
) -> None:
    clock, provider, told = await running_provider(endpoint)
    endpoint.page = b"<html>Proxy maintenance</html>"
    clock.now += LIFETIME_S + 1
    with pytest.raises(OAuthTokenUnavailable) as unavailable:
        await provider.token()
    assert "answered 200 without an access_token" in str(unavailable.value)
    endpoint.page = None
    clock.now += 1
    assert await provider.token() == "token-3"
    assert told == []


@pytest.mark.parametrize(("header", "seconds"), [
    ("120", 120.0), (" 7 ", 7.0), ("0", 0.0), ("99999999", 3600.0),
    ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0), ("soon", None), ("-3", None), ("", None),
], ids=["seconds", "spaces", "zero", "capped", "past-date", "words", "negative", "empty"])
def test_retry_after_is_seconds_or_an_http_date(header: str, seconds: float | None) -> None:
    response = httpx.Response(429, headers={"Retry-After": header})
    assert retry_after_s(response) == seconds


def test_a_retry_after_date_is_the_seconds_until_it() -> None:
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=2)
    response = httpx.Response(429, headers={"Retry-After": email.utils.format_datetime(
        when, usegmt=True)})
    waited = retry_after_s(response)
    assert waited is not None
    assert 100 < waited <= 120


async def test_a_redirect_is_not_followed(endpoint: TokenEndpoint) -> None:
    endpoint.status = 302
    with pytest.raises(OAuthTokenRefused) as refused:
        await provider_for(endpoint, Clock()).token()
    assert ": redirected (not followed): HTTP 302 (check" in str(refused.value)


@pytest.mark.parametrize(
    ("expires_in", "lifetime_s"),
    [(None, 60), ("30", 30), (10**400, 60), (float("nan"), 60), ("NaN", 60),
     (float("inf"), 60), (0, 60), (-5, 60), (10**8, 60), (True, 60)],
    ids=["absent", "string", "huge", "nan", "nan-string", "inf", "zero", "negative",
         "over-10^7", "bool"])
async def test_a_token_without_a_usable_expires_in_still_expires(
    endpoint: TokenEndpoint, expires_in: Any, lifetime_s: float,
) -> None:
    endpoint.expires_in = expires_in
    clock = Clock()
    provider = provider_for(endpoint, clock)
    assert await provider.token() == "token-1"
    clock.now += 0.79 * lifetime_s
    assert await provider.token() == "token-1", "cached until 80% of the lifetime"
    await provider.fetched()
    assert len(endpoint.requests) == 1
    clock.now += 0.02 * lifetime_s
    await provider.token()
    await provider.fetched()
    assert await provider.token() == "token-2"


def test_a_lifetime_comes_from_expires_in_else_the_jwt_else_the_default() -> None:
    payload = base64.urlsafe_b64encode(json.dumps({"exp": 1300}).encode()).decode().rstrip("=")
    jwt = f"h.{payload}.s"
    assert token_lifetime(120, jwt, 1000.0) == 120
    assert token_lifetime(float("nan"), jwt, 1000.0) == 300
    assert token_lifetime(0, jwt, 1000.0) == 300
    assert token_lifetime(10**400, "opaque", 1000.0) == DEFAULT_LIFETIME_S
    assert token_lifetime(None, jwt, 2000.0) == DEFAULT_LIFETIME_S, "an expired exp"


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


@pytest.mark.parametrize(("status", "page", "answer"), [
    (429, None, "answered HTTP 429"),
    (200, b"<html>Proxy login</html>", "answered 200 without an access_token"),
], ids=["rate-limited", "proxy-page"])
async def test_no_token_at_start_is_one_line_whatever_the_answer(
    endpoint: TokenEndpoint, status: int, page: bytes | None, answer: str,
) -> None:
    endpoint.status, endpoint.page, endpoint.retry_after = status, page, "5"
    with pytest.raises(ConfigError) as refused:
        await start_with(endpoint.url)
    assert str(refused.value) == (
        f"kafka_oauth_failed: the token endpoint {endpoint.url}: {answer} (check "
        "KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL, KAFKA_SASL_OAUTH_CLIENT_ID, "
        "KAFKA_SASL_OAUTH_CLIENT_SECRET and KAFKA_SASL_OAUTH_SCOPE)")


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
