"""An OAuth 2.0 token endpoint on loopback (a thread), scriptable: status, lifetime, a held
answer, Retry-After, a page instead of a token. For the provider's unit tests and the
secrets-in-output test; ``tests/support/oauth_server.py`` is the one that signs real JWTs for
the test brokers."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs

import pytest

from tests.support.loopback_http import LoopbackHTTP

CLIENT_ID = "groundedness-worker"
CLIENT_SECRET = "oauth-Client-Secret-61"
LIFETIME_S = 100


class TokenEndpoint:
    """An OAuth 2.0 token endpoint: client credentials only; ``status`` other than 200 is
    answered with an RFC 6749 error body."""

    def __init__(self) -> None:
        self.status = 200
        self.token_prefix = "token-"
        self.expires_in: Any = LIFETIME_S
        self.retry_after: str | None = None  # sent with every answer when set
        self.page: bytes | None = None  # answered with 200 instead of a token (a proxy's page)
        self.requests: list[dict[str, list[str]]] = []
        self.answering = threading.Event()  # cleared: requests wait (a slow issuer)
        self.answering.set()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = parse_qs(self.rfile.read(length).decode())
                endpoint.requests.append(form)
                endpoint.answering.wait(30)
                expected = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
                if endpoint.page is not None:
                    self._send(200, "text/html", endpoint.page)
                elif endpoint.status == 401:
                    self._answer(401, {"error": "invalid_client"})
                elif endpoint.status != 200:
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
                self._send(status, "application/json", json.dumps(body).encode())

            def _send(self, status: int, content_type: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                if endpoint.retry_after is not None:
                    self.send_header("Retry-After", endpoint.retry_after)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._http = LoopbackHTTP(Handler)
        self.url = f"http://127.0.0.1:{self._http.port}/oauth/token"

    def close(self) -> None:
        self.answering.set()
        self._http.close()


@pytest.fixture
def endpoint() -> Iterator[TokenEndpoint]:
    server = TokenEndpoint()
    yield server
    server.close()
