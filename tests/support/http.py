"""HTTP helpers for tests of the worker's health server: a client and a status poll."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx2
import pytest


@pytest.fixture
async def http() -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(trust_env=False, timeout=5) as client:
        yield client


async def wait_status(http: httpx2.AsyncClient, url: str, status: int,
                      timeout_s: float, containing: str = "") -> httpx2.Response:
    """Poll ``url`` until it answers ``status`` (with ``containing`` in its body); the last
    response (or fail on timeout)."""
    deadline = time.monotonic() + timeout_s
    last: httpx2.Response | None = None
    while time.monotonic() < deadline:
        try:
            last = await http.get(url)
            if last.status_code == status and containing in last.text:
                return last
        except httpx2.TransportError:
            pass  # not listening yet
        await asyncio.sleep(0.2)
    raise AssertionError(f"{url} never answered {status} in {timeout_s}s; last: "
                         f"{last and (last.status_code, last.text)}")


