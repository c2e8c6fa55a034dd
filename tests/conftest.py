"""Shared fixtures: a real Kafka broker (session), the fake judge (a real HTTP server), the real
helm, an HTTP client for the health server, and structlog back at its defaults."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog

from scripts.kafka.broker import kafka_bootstrap
from tests.support.fixtures import fake_judge, helm
from tests.support.http import http

__all__ = ["fake_judge", "helm", "http"]


@pytest.fixture(scope="session")
def kafka() -> Iterator[str]:
    """The bootstrap address of a real broker (env, testcontainers, or scripts/kafka-local)."""
    address, cleanup = kafka_bootstrap()
    try:
        yield address
    finally:
        cleanup()


@pytest.fixture(autouse=True)
def default_structlog() -> Iterator[None]:
    """Every test starts from structlog's defaults: another may have configured logging (a
    level that filters info events out, a stream since closed) and left it so, which made a
    test's outcome depend on the order the files ran in."""
    saved = structlog.get_config()
    structlog.reset_defaults()
    yield
    structlog.configure(**saved)
