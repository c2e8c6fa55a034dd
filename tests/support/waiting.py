"""Waiting, in a test, for a condition that something running beside it makes true."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(
    condition: Callable[[], bool], timeout_s: float = 5.0, interval_s: float = 0.01
) -> None:
    """Wait for ``condition`` (checked every ``interval_s``); fail the test if it does not
    come true within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition never came true"
        await asyncio.sleep(interval_s)
