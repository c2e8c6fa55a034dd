"""What the client-credentials provider sends to the token endpoint, and what it says back.

Against real HTTP servers on loopback: ``tests.support.oauth_server.OAuthServer`` (it decodes
the client id and secret as RFC 6749 2.3.1 says), a server that trickles its answer, and
nothing listening at all (for the URL's credentials in the messages).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from consumer.errors import ConfigError
from consumer.kafka.auth.oauth import (
    ClientCredentialsTokenProvider,
    OAuthTokenRefused,
    OAuthTokenUnavailable,
    shown_url,
)
from consumer.settings import load_settings
from tests.support.loopback_http import LoopbackHTTP
from tests.support.oauth_server import OAuthServer
from tests.support.ports import free_port


@pytest.mark.parametrize(("client_id", "client_secret"), [
    ("groundedness-worker", "Azure+Secret/9="),
    ("groundedness-worker", "pct%41secret"),
    ("svc:account", "plain-Secret-12"),
    ("id with space", "a&b=c?d#e"),
    ("groundedness-worker", "ünïcode-Sécret"),
], ids=["plus-slash-equals", "percent", "colon-in-id", "space-and-form-chars", "unicode"])
async def test_the_client_id_and_secret_are_form_encoded_before_basic(
    client_id: str, client_secret: str,
) -> None:
    with OAuthServer(client_id=client_id, client_secret=client_secret) as server:
        provider = ClientCredentialsTokenProvider(server.token_url, client_id, client_secret)
        token = await provider.token()
        assert server.issued[0].token == token


async def test_a_wrong_secret_still_gets_refused() -> None:
    with OAuthServer(client_secret="right+Secret") as server:
        provider = ClientCredentialsTokenProvider(server.token_url, server.client_id,
                                                  "right Secret")  # "+" decodes to " "
        with pytest.raises(OAuthTokenRefused, match="refused the client: HTTP 401"):
            await provider.token()


URL_SECRET = "in-the-Url-Pass-42"
QUERY_SECRET = "query-Key-93"


async def test_credentials_in_the_endpoint_url_are_never_shown() -> None:
    url = f"http://user:{URL_SECRET}@127.0.0.1:{free_port()}/token?key={QUERY_SECRET}"
    provider = ClientCredentialsTokenProvider(url, "id", "secret")
    with pytest.raises(OAuthTokenRefused) as at_start:
        await provider.token()
    message = at_start.value.args[0]
    assert message.startswith(f"the token endpoint {shown_url(url)}: unreachable (")
    assert "127.0.0.1" in message
    for secret in (URL_SECRET, QUERY_SECRET, "user:"):
        assert secret not in message


async def test_nor_while_running() -> None:
    now = [0.0]
    with OAuthServer(lifetime_s=10) as server:
        url = server.token_url.replace("http://", f"http://user:{URL_SECRET}@")
        url += f"?k={QUERY_SECRET}"
        provider = ClientCredentialsTokenProvider(url, server.client_id, server.client_secret,
                                                  clock=lambda: now[0])
        await provider.token()
    now[0] = 11.0  # expired, and the endpoint is gone
    with pytest.raises(OAuthTokenUnavailable) as running:
        await provider.token()
    message = str(running.value)  # as aiokafka logs it
    assert f"the token endpoint {server.token_url}: unreachable (" in message
    for secret in (URL_SECRET, QUERY_SECRET):
        assert secret not in message


def test_the_shown_url_has_no_userinfo_nor_query() -> None:
    assert shown_url("https://u:p@idp.example:8443/realms/x/token?k=v#f") == (
        "https://idp.example:8443/realms/x/token")
    assert shown_url("http://[::1]:80/token") == "http://[::1]:80/token"
    assert shown_url("http://idp.example/token") == "http://idp.example/token"


class TricklingEndpoint:
    """Answers 200 with headers at once, then a body byte every 0.1 s for 30 s: each read
    is quick, the answer never done."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "1000")
                self.end_headers()
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not endpoint.stop.is_set():
                    try:
                        self.wfile.write(b" ")
                        self.wfile.flush()
                    except OSError:
                        return  # the client gave up
                    endpoint.stop.wait(0.1)

            def log_message(self, *args: Any) -> None:
                pass

        self._http = LoopbackHTTP(Handler)
        self.url = f"http://127.0.0.1:{self._http.port}/token"

    def close(self) -> None:
        self.stop.set()
        self._http.close()


@pytest.fixture
def trickling() -> Iterator[TricklingEndpoint]:
    endpoint = TricklingEndpoint()
    yield endpoint
    endpoint.close()


async def test_the_timeout_bounds_the_whole_request(trickling: TricklingEndpoint) -> None:
    now = [0.0]
    provider = ClientCredentialsTokenProvider(trickling.url, "id", "secret", timeout_s=0.5,
                                              clock=lambda: now[0])
    # A guard against the 30 s trickle, not a timing: the provider must give up first.
    with pytest.raises(OAuthTokenRefused) as at_start:
        await asyncio.wait_for(provider.token(), 10)
    assert "unreachable (no answer within 0.5 s)" in str(at_start.value)


async def test_while_running_a_timeout_is_unavailable_not_refused(
    trickling: TricklingEndpoint,
) -> None:
    with OAuthServer(lifetime_s=10) as server:
        now = [0.0]
        provider = ClientCredentialsTokenProvider(server.token_url, server.client_id,
                                                  server.client_secret, timeout_s=0.5,
                                                  clock=lambda: now[0])
        await provider.token()
    provider.endpoint_url = trickling.url  # the same issuer, now trickling
    now[0] = 11.0
    with pytest.raises(OAuthTokenUnavailable):
        await asyncio.wait_for(provider.token(), 10)


def test_credentials_in_the_endpoint_url_are_refused_at_load_without_echoing_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL",
                       f"https://svc:{URL_SECRET}@idp.example/oauth2/token")
    with pytest.raises(ConfigError) as refused:
        load_settings(require_threshold=False, kafka_security_protocol="SASL_SSL",
                      kafka_sasl_mechanism="OAUTHBEARER", kafka_sasl_oauth_client_id="id",
                      kafka_sasl_oauth_client_secret="secret")
    message = str(refused.value)
    assert message.startswith(
        "KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL must not hold credentials (user:password@)")
    assert URL_SECRET not in message
    assert "\n" not in message


PASSWORD = "S3cret-PW-58"
NOT_A_URL = [  # each read by a lenient parser as something that would show the password
    f"idp-user:{PASSWORD}@idp.example/token",  # no scheme: "idp-user" is read as one
    f"https:\\\\user:{PASSWORD}@idp.example/token",  # backslashes: no host, all path
    f"//user:{PASSWORD}@idp.example/token",
    f"https://idp.example:{PASSWORD}/token",  # a port that is not a number
    f"https://[::1/token?k={PASSWORD}",
    f"ftp://user:{PASSWORD}@idp.example/token",
]
NOT_A_URL_IDS = ["no-scheme", "backslashes", "no-scheme-slashes", "bad-port", "bad-ipv6", "ftp"]


def oauth_settings(url: str) -> None:
    load_settings(require_threshold=False, kafka_security_protocol="SASL_SSL",
                  kafka_sasl_mechanism="OAUTHBEARER", kafka_sasl_oauth_client_id="id",
                  kafka_sasl_oauth_client_secret="secret",
                  kafka_sasl_oauth_token_endpoint_url=url)


@pytest.mark.parametrize("url", NOT_A_URL, ids=NOT_A_URL_IDS)
def test_an_endpoint_that_is_no_http_url_is_refused_at_load_without_echoing_it(
    url: str,
) -> None:
    with pytest.raises(ConfigError) as refused:
        oauth_settings(url)
    message = str(refused.value)
    assert message in {
        "KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL must be an http:// or https:// URL with a host",
        "KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL is not a valid URL",
    }
    assert PASSWORD not in message


@pytest.mark.parametrize("url", NOT_A_URL, ids=NOT_A_URL_IDS)
async def test_nor_does_the_provider_show_it(url: str) -> None:
    """Built without the settings (as a test or a script would): its messages still hide it."""
    assert PASSWORD not in shown_url(url)
    with pytest.raises(OAuthTokenRefused) as at_start:
        await ClientCredentialsTokenProvider(url, "id", "secret", timeout_s=2).token()
    assert PASSWORD not in str(at_start.value)


def test_an_http_url_with_a_host_is_shown_and_anything_else_is_not() -> None:
    assert shown_url("idp-user:pw@idp.example/token") == "(the configured URL)"
    assert shown_url("https:\\\\user:pw@idp.example/token") == "(the configured URL)"
    assert shown_url("HTTPS://idp.example/token") == "https://idp.example/token"


def test_an_at_sign_in_the_path_or_query_is_not_credentials() -> None:
    settings = load_settings(
        require_threshold=False, kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="OAUTHBEARER", kafka_sasl_oauth_client_id="id",
        kafka_sasl_oauth_client_secret="secret",
        kafka_sasl_oauth_token_endpoint_url="https://idp.example?u=x@y")
    assert settings.kafka_sasl_oauth_token_endpoint_url == "https://idp.example?u=x@y"
