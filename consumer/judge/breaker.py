"""A circuit breaker for the judge: when it fails for everyone, hold and probe.

Closed: calls flow. Open (tripped by an outage): new calls wait at the gate, and one task
probes the judge with a tiny request at growing intervals; the first success closes the
circuit and releases every waiter. Traces are never failed because of an outage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from consumer.ops import metrics

log = structlog.get_logger(__name__)

Probe = Callable[[], Awaitable[bool]]


class CircuitBreaker:
    """Gate for judge calls, opened on outage, closed by a successful probe."""

    def __init__(self, probe: Probe, first_delay_s: float = 1.0, max_delay_s: float = 30.0) -> None:
        self._probe = probe
        self._first_delay_s = first_delay_s
        self._max_delay_s = max_delay_s
        self._closed = asyncio.Event()
        self._closed.set()
        self._prober: asyncio.Task[None] | None = None
        self.trips = 0  # times the circuit opened (an outage, not a trace, each time)

    @property
    def is_open(self) -> bool:
        """True while the judge is considered down."""
        return not self._closed.is_set()

    async def wait_closed(self) -> None:
        """Return once calls may flow."""
        await self._closed.wait()

    def trip(self, reason: str, **details: object) -> None:
        """Open the circuit (idempotent) and start probing; ``details`` (the status, the
        parameter the endpoint named, its message) go on the one log line that says why."""
        if self._prober is not None and not self._prober.done():
            return
        self.trips += 1
        log.warning("judge_circuit_open", reason=reason, **details)
        self._closed.clear()
        metrics.CIRCUIT_OPEN.set(1)
        self._prober = asyncio.create_task(self._probe_until_healthy(), name="judge-probe")

    async def _probe_until_healthy(self) -> None:
        delay = self._first_delay_s
        while True:
            await asyncio.sleep(delay)
            if await self._probe_once():
                log.info("judge_circuit_closed")
                self._closed.set()
                metrics.CIRCUIT_OPEN.set(0)
                return
            delay = min(delay * 2, self._max_delay_s)

    async def _probe_once(self) -> bool:
        # A probe that raises (a bug, an error the judge's map does not know) counts as a
        # failed probe: were the probing task to die, the circuit would stay open for ever.
        try:
            return await self._probe()
        except Exception as exc:
            log.warning("judge_probe_crashed", error=f"{type(exc).__name__}: {exc}"[:300])
            return False

    async def close(self) -> None:
        """Stop probing (shutdown)."""
        if self._prober is not None:
            self._prober.cancel()
            await asyncio.gather(self._prober, return_exceptions=True)
