"""``OAuthServer``: a small real OAuth 2.0 token endpoint and JWKS, for OAUTHBEARER tests.

It grants the client-credentials flow (RFC 6749 4.4) to one client, authenticated by HTTP
Basic (``client_secret_basic``) or by form fields (``client_secret_post``), and answers with a
real RS256 JWT that Kafka's own OIDC validator checks against ``/jwks``::

    POST {url}/token   grant_type=client_credentials[&scope=...]
        200 {"access_token": JWT, "token_type": "Bearer", "expires_in": N, "scope": ...}
        401 {"error": "invalid_client"}           wrong client, or while ``refusing``
        400 {"error": "unsupported_grant_type"}   any other grant
    GET  {url}/jwks    {"keys": [the RSA public key, kid KEY_ID]}

The JWT's claims: ``iss`` (the server's URL), ``sub`` (the client id), ``aud``, ``scope``,
``iat``, ``exp`` (``iat + lifetime_s``) and ``jti``. Knobs, settable while serving:
``lifetime_s`` (tests use tokens that expire within a minute), ``refusing`` (every token
request gets a 401), and two that make the endpoint grant tokens the broker refuses:
``forging`` (signed by a key the JWKS does not hold) and ``granted_audience`` (an ``aud``
other than ``audience``, the one the broker validates). ``tokens_issued`` counts the tokens
granted; ``issued`` has when.

It serves from a thread of its own, not from the test's event loop: the broker fetches the
JWKS while the test may be blocked waiting for ``scripts/kafka-local start``.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

KEY_ID = "groundedness-test-key"
DEFAULT_CLIENT_ID = "groundedness-worker"
DEFAULT_CLIENT_SECRET = "oauth-client-Secret-31"  # a test secret: tests grep outputs for it
DEFAULT_AUDIENCE = "kafka"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(value: int) -> str:
    return _b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


def sign_jwt(claims: dict[str, Any], key: rsa.RSAPrivateKey, key_id: str = KEY_ID) -> str:
    """A compact RS256 JWS of ``claims`` (RFC 7515/7518)."""
    header = {"alg": "RS256", "typ": "JWT", "kid": key_id}
    signing_input = ".".join(
        _b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
    )
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64url(signature)}"


def jwk(key: rsa.RSAPrivateKey, key_id: str = KEY_ID) -> dict[str, str]:
    """The public half of ``key`` as a JWK (RFC 7517)."""
    public = key.public_key().public_numbers()
    return {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": key_id,
            "n": _uint(public.n), "e": _uint(public.e)}


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass(frozen=True)
class IssuedToken:
    """One token granted: when (``time.time()``), until when, to which scope, and itself."""

    issued_at: float
    expires_at: float
    scope: str
    token: str  # for tests that grep outputs for the tokens granted


class OAuthServer:
    """Token endpoint and JWKS on 127.0.0.1 (``port=0``: a free one). Use as a context
    manager, or ``start()`` and ``stop()``."""

    def __init__(self, *, client_id: str = DEFAULT_CLIENT_ID,
                 client_secret: str = DEFAULT_CLIENT_SECRET, audience: str = DEFAULT_AUDIENCE,
                 lifetime_s: int = 3600, port: int = 0) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.audience = audience
        self.lifetime_s = lifetime_s
        self.refusing = False
        self.forging = False
        self.granted_audience: str | None = None
        self._key = _new_key()
        self._lock = threading.Lock()
        self._issued: list[IssuedToken] = []
        self._token_requests = 0
        self._http = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._http.daemon_threads = True
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ addresses

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/jwks"

    @property
    def issuer(self) -> str:
        return self.url

    # ------------------------------------------------------------------ counters

    @property
    def tokens_issued(self) -> int:
        with self._lock:
            return len(self._issued)

    @property
    def issued(self) -> list[IssuedToken]:
        with self._lock:
            return list(self._issued)

    @property
    def token_requests(self) -> int:
        """Every POST to the token endpoint, refused ones included."""
        with self._lock:
            return self._token_requests

    # ------------------------------------------------------------------ tokens

    def claims(self, *, lifetime_s: float | None = None, scope: str = "") -> dict[str, Any]:
        now = int(time.time())
        lifetime = int(self.lifetime_s if lifetime_s is None else lifetime_s)
        claims: dict[str, Any] = {
            "iss": self.issuer, "sub": self.client_id, "aud": self.audience,
            "iat": now, "exp": now + lifetime, "jti": uuid.uuid4().hex,
        }
        if scope:
            claims["scope"] = scope
        return claims

    def token(self, *, lifetime_s: float | None = None, scope: str = "") -> str:
        """A token as the endpoint grants it, without the HTTP round trip (not counted)."""
        return sign_jwt(self.claims(lifetime_s=lifetime_s, scope=scope), self._key)

    def foreign_token(self) -> str:
        """Valid claims, this server's key id, but signed by a key the JWKS does not hold:
        what a forger would send. A broker checking signatures refuses it."""
        return sign_jwt(self.claims(), _new_key())

    def jwks(self) -> dict[str, list[dict[str, str]]]:
        return {"keys": [jwk(self._key)]}

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> OAuthServer:
        self._thread = threading.Thread(target=self._http.serve_forever,
                                        name="oauth-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._http.shutdown()
            self._thread.join()
            self._thread = None
        self._http.server_close()

    def __enter__(self) -> OAuthServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # ------------------------------------------------------------------ HTTP

    def _grant(self, headers: Any, body: bytes) -> tuple[int, dict[str, Any]]:
        """(status, JSON body) for one token request."""
        form = {name: values[0] for name, values in parse_qs(body.decode()).items()}
        client_id, client_secret = _basic_credentials(headers.get("Authorization", ""))
        client_id = client_id or form.get("client_id", "")
        client_secret = client_secret or form.get("client_secret", "")
        with self._lock:
            self._token_requests += 1
        if self.refusing or (client_id, client_secret) != (self.client_id, self.client_secret):
            return 401, {"error": "invalid_client",
                         "error_description": "client authentication failed"}
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        scope = form.get("scope", "")
        claims = self.claims(scope=scope)
        if self.granted_audience is not None:
            claims["aud"] = self.granted_audience
        token = sign_jwt(claims, _new_key() if self.forging else self._key)
        with self._lock:
            self._issued.append(IssuedToken(time.time(), float(claims["exp"]), scope, token))
        reply: dict[str, Any] = {"access_token": token, "token_type": "Bearer",
                                 "expires_in": claims["exp"] - claims["iat"]}
        if scope:
            reply["scope"] = scope
        return 200, reply

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/jwks":
                    self._reply(200, server.jwks())
                else:
                    self._reply(404, {"error": "not_found"})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.split("?")[0] != "/token":
                    self._reply(404, {"error": "not_found"})
                    return
                status, reply = server._grant(self.headers, body)
                self._reply(status, reply)

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Cache-Control", "no-store")
                if status == 401:
                    self.send_header("WWW-Authenticate", 'Basic realm="token"')
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: a test's output is for the worker's lines."""

        return Handler


def _basic_credentials(authorization: str) -> tuple[str, str]:
    """(client id, secret) from an HTTP Basic header, each form-url-decoded as RFC 6749
    2.3.1 says; empty strings when there is none or it is malformed."""
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() != "basic":
        return "", ""
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return "", ""
    client_id, sep, secret = decoded.partition(":")
    if not sep:
        return "", ""
    return unquote(client_id.replace("+", " ")), unquote(secret.replace("+", " "))
