"""Shared fixtures: a real Kafka broker (session), a second one with SASL, TLS and OAuth
listeners (session, started by the first test that asks), the fake judge (a real HTTP
server), the real helm, an HTTP client for the health server, and structlog back at its
defaults."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog

from scripts.kafka.broker import kafka_bootstrap
from tests.support.fixtures import fake_judge, helm
from tests.support.http import http
from tests.support.oauth_server import OAuthServer
from tests.support.tls_material import TlsBroker, running_tls_broker

__all__ = ["fake_judge", "helm", "http"]


@pytest.fixture(scope="session")
def kafka() -> Iterator[str]:
    """The bootstrap address of a real broker (env, testcontainers, or scripts/kafka-local)."""
    address, cleanup = kafka_bootstrap()
    try:
        yield address
    finally:
        cleanup()


@pytest.fixture(scope="session")
def tls_broker() -> Iterator[TlsBroker]:
    """The token server, then a kafka-local broker with every SASL, TLS and OAuth listener on
    free ports; one for the session, stopped and removed at its end. A test that changes the
    token server (a lifetime, refusing) puts it back before it returns."""
    with OAuthServer() as oauth, running_tls_broker(oauth) as broker:
        yield broker


@pytest.fixture(autouse=True)
def default_structlog() -> Iterator[None]:
    """Every test starts from structlog's defaults: another may have configured logging (a
    level that filters info events out, a stream since closed) and left it so, which made a
    test's outcome depend on the order the files ran in."""
    saved = structlog.get_config()
    structlog.reset_defaults()
    yield
    structlog.configure(**saved)
