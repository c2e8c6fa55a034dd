"""Shared fixtures: a real Kafka broker (session) and the fake judge (a real HTTP server)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.fixtures import fake_judge
from tests.support.kafka import kafka_bootstrap

__all__ = ["fake_judge"]


@pytest.fixture(scope="session")
def kafka() -> Iterator[str]:
    """The bootstrap address of a real broker (env, testcontainers, or scripts/kafka-local)."""
    address, cleanup = kafka_bootstrap()
    try:
        yield address
    finally:
        cleanup()
