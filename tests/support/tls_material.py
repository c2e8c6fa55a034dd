"""A kafka-local broker with its TLS listeners, for the tests that need one.

``running_tls_broker(oauth)`` finds nine consecutive free ports, starts
``KAFKA_PORT=<first> KAFKA_TLS=1 KAFKA_OAUTH_JWKS_URL=<oauth.jwks_url> scripts/kafka-local
start`` on them, and stops it (its data removed) afterwards; the token server must already
serve, since the broker reads its JWKS while it starts. The suite starts one, for the whole
session (``tls_broker`` in ``tests/conftest.py``), for every module that needs a SASL, TLS or
OAuth listener: a JVM start costs about 10 s on two cores.

The listeners (``TlsBroker.addresses``, by the labels kafka-local prints) and the PEM files
(``TlsBroker.file(name)``, names in ``scripts/kafka/certs.py``) are described in the header of
``scripts/kafka-local``.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.kafka import KAFKA_LOCAL, START_TIMEOUT_S, STOP_TIMEOUT_S
from tests.support.oauth_server import OAuthServer
from tests.support.ports import free_port_block

DEFAULT_USERNAME = "tls-test-user"
DEFAULT_PASSWORD = "tls-test-Secret-58"  # a test secret: tests grep outputs for it


@dataclass(frozen=True)
class TlsBroker:
    """What ``kafka-local start`` printed: the listeners (label -> host:port: plaintext, sasl,
    ssl, mtls, sasl-ssl, oauth, ssl-wrong-host, ssl-expired) and the PEM directory."""

    addresses: dict[str, str]
    tls_dir: Path
    oauth: OAuthServer
    username: str  # the SCRAM user of the sasl and sasl-ssl listeners
    password: str
    start_s: float  # how long ``kafka-local start`` took
    port: int  # KAFKA_PORT: the plaintext listener's; the others follow it

    def file(self, name: str) -> str:
        """The path of one PEM file, e.g. ``file("ca.crt")``."""
        return str(self.tls_dir / name)

    @property
    def server_log(self) -> Path:
        """The broker's log4j log, where it says why it refused a token."""
        return self.tls_dir.parent / "logs" / "server.log"


def kafka_local_tls(command: str, port: int, extra: dict[str, str]) -> (
        subprocess.CompletedProcess[str]):
    """``KAFKA_PORT=port KAFKA_TLS=1 scripts/kafka-local COMMAND`` with ``extra`` env; the
    port-related variables a developer's shell may hold are dropped, so the ports follow."""
    env = {**os.environ, "KAFKA_PORT": str(port), "KAFKA_TLS": "1", **extra}
    for inherited in ("KAFKA_SASL_PORT", "KAFKA_CONTROLLER_PORT", "KAFKA_TLS_DIR"):
        env.pop(inherited, None)
    return subprocess.run(
        [str(KAFKA_LOCAL), *command.split()], env=env, capture_output=True, text=True,
        timeout=START_TIMEOUT_S if command == "start" else STOP_TIMEOUT_S, check=False,
    )


LISTENERS = 9  # kafka-local's ports with KAFKA_TLS=1: KAFKA_PORT .. KAFKA_PORT+8


@contextmanager
def running_tls_broker(oauth: OAuthServer, port: int | None = None, *,
                       username: str = DEFAULT_USERNAME,
                       password: str = DEFAULT_PASSWORD) -> Iterator[TlsBroker]:
    """A TLS broker on ``port`` (ports port..port+8; free ones when None) validating
    ``oauth``'s tokens; stopped and its data removed afterwards."""
    port = free_port_block(LISTENERS) if port is None else port
    extra = {"KAFKA_SASL_USERNAME": username, "KAFKA_SASL_PASSWORD": password,
             "KAFKA_OAUTH_JWKS_URL": oauth.jwks_url, "KAFKA_OAUTH_ISSUER": oauth.issuer,
             "KAFKA_OAUTH_AUDIENCE": oauth.audience}
    began = time.monotonic()
    started = kafka_local_tls("start", port, extra)
    if started.returncode != 0:  # e.g. data formatted for other SCRAM credentials
        kafka_local_tls("reset", port, extra)
        began = time.monotonic()
        started = kafka_local_tls("start", port, extra)
    start_s = time.monotonic() - began
    if started.returncode != 0:
        raise RuntimeError(f"kafka-local start (TLS, KAFKA_PORT={port}) failed:\n"
                           f"{started.stderr}")
    lines = started.stdout.strip().splitlines()
    labels = dict(line.split(": ", 1) for line in lines[:-1])
    tls_dir = Path(labels.pop("tls-dir"))
    try:
        yield TlsBroker({**labels, "plaintext": lines[-1]}, tls_dir, oauth, username, password,
                        start_s, port)
    finally:
        kafka_local_tls("reset", port, extra)
