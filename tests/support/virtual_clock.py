"""An asyncio event loop on a virtual clock: every sleep returns at once, the clock jumped.

Timing properties (rate limits over 60 s windows) are then exact and deterministic: the loop's
``time()`` is the virtual clock, and whenever the loop would block waiting for its next timer,
the selector moves the clock to that timer instead. Real I/O still works (it is polled without
blocking), but a test on this loop should do none.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _Clock:
    now = 0.0


# The loop runs a timer due within its clock resolution (1 ns) at once; nudging the clock by
# at least that much on every turn keeps a waiter that recomputes a vanishing delay (float
# rounding) from spinning at one instant, as real time would.
_TICK_S = 1e-9


class _JumpingSelector(selectors.DefaultSelector):
    """Never blocks: a wait for the next timer moves the virtual clock there instead."""

    def __init__(self, clock: _Clock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if ready:
            return ready
        if timeout is None:
            # Nothing is ready and no timer is due: the loop would sleep for ever.
            raise RuntimeError("deadlock: every task waits and no timer is set")
        self._clock.now += max(timeout, _TICK_S)
        return ready


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose ``time()`` is virtual (starts at 0)."""

    def __init__(self) -> None:
        self._clock = _Clock()
        super().__init__(_JumpingSelector(self._clock))

    def time(self) -> float:
        """The virtual time, in seconds."""
        return self._clock.now


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh virtual-clock loop, then close the loop."""
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        loop.close()
