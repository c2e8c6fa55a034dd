"""A failing start never shows a secret: the key password, the OAuth client secret, a token.

``groundedness run`` as a subprocess, at debug level (aiokafka's and httpx's own records
included), against a loopback TLS server and a token endpoint (no broker: each start fails
before any Kafka byte). Each run must exit 2 with its one line; every byte it wrote, stdout
and stderr, is searched for every secret it was given or was issued.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from scripts.kafka import certs
from tests.support.tls_server import KEY_PASSWORD, Pki, TlsServer, pki
from tests.support.token_endpoint import CLIENT_ID, CLIENT_SECRET, TokenEndpoint, endpoint
from tests.support.workers import (
    GROUNDEDNESS,
    REPO_ROOT,
    WORKER_VARIABLES,
    tracebacks,
    worker_env,
)

__all__ = ["endpoint", "pki"]  # the fixtures, shared with their modules



@dataclass(frozen=True)
class Run:
    exit_code: int
    output: str  # stdout and stderr

    def lines_with(self, text: str) -> list[str]:
        return [line for line in self.output.splitlines() if text in line]


@pytest.fixture
def tls_server(pki: Pki) -> Iterator[TlsServer]:
    server = TlsServer(*pki.leaf("broker"), client_cafile=pki.cafile)
    yield server
    server.close()


@pytest.fixture
def rogue_server(pki: Pki) -> Iterator[TlsServer]:
    server = TlsServer(*pki.leaf("rogue", ca=certs.make_ca("Rogue CA")))
    yield server
    server.close()


async def run_worker(port: int, **overrides: str) -> Run:
    env = {k: v for k, v in os.environ.items()
           if k.upper() not in WORKER_VARIABLES and not k.upper().startswith(("KAFKA_", "AWS_"))}
    env |= worker_env({"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"}, "http://127.0.0.1:9/v1",
                      LOG_LEVEL="debug", **overrides)
    done = await asyncio.to_thread(
        subprocess.run, [str(GROUNDEDNESS), "run"], env=env, cwd=str(REPO_ROOT),
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False)
    return Run(done.returncode, done.stdout + done.stderr)


def mutual_tls(pki: Pki, key_password: str = KEY_PASSWORD) -> dict[str, str]:
    return {"KAFKA_SSL_CAFILE": pki.cafile, "KAFKA_SSL_CERTFILE": pki.client_cert,
            "KAFKA_SSL_KEYFILE": pki.client_key, "KAFKA_SSL_KEY_PASSWORD": key_password}


def oauth(endpoint: TokenEndpoint, secret: str = CLIENT_SECRET) -> dict[str, str]:
    return {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_MECHANISM": "OAUTHBEARER",
            "KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL": endpoint.url,
            "KAFKA_SASL_OAUTH_CLIENT_ID": CLIENT_ID, "KAFKA_SASL_OAUTH_CLIENT_SECRET": secret}


def assert_one_line_and_no_secret(run: Run, event: str, *secret_values: str) -> None:
    assert run.exit_code == 2, run.output
    assert len(run.lines_with(event)) == 1, run.output
    assert not tracebacks(run.output), run.output
    for value in secret_values:
        assert value not in run.output, f"a secret ({value[:3]}...) was written"


async def test_a_wrong_key_password(tls_server: TlsServer, pki: Pki) -> None:
    wrong = "wrong-Key-Pass-38"
    run = await run_worker(tls_server.port, KAFKA_SECURITY_PROTOCOL="SSL",
                           **mutual_tls(pki, key_password=wrong))
    assert_one_line_and_no_secret(
        run, "KAFKA_SSL_KEY_PASSWORD does not decrypt KAFKA_SSL_KEYFILE", wrong, KEY_PASSWORD)


async def test_a_refused_client_secret(
    tls_server: TlsServer, pki: Pki, endpoint: TokenEndpoint,
) -> None:
    wrong = "wrong-Client-Secret-52"
    run = await run_worker(tls_server.port, **mutual_tls(pki), **oauth(endpoint, wrong))
    assert_one_line_and_no_secret(run, "kafka_oauth_failed", wrong, CLIENT_SECRET, KEY_PASSWORD)
    assert "HTTP 401 invalid_client" in run.lines_with("kafka_oauth_failed")[0]


async def test_an_issued_token_then_a_refused_handshake(
    rogue_server: TlsServer, pki: Pki, endpoint: TokenEndpoint,
) -> None:
    endpoint.token_prefix = f"issued-Token-{secrets.token_hex(8)}-"
    run = await run_worker(rogue_server.port, **mutual_tls(pki), **oauth(endpoint))
    assert len(endpoint.requests) == 1, "the token was fetched before connecting"
    assert_one_line_and_no_secret(run, "kafka_tls_failed", endpoint.token_prefix, CLIENT_SECRET,
                                  KEY_PASSWORD)
    assert "unknown CA" in run.lines_with("kafka_tls_failed")[0]
