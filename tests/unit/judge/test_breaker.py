"""The judge's circuit breaker: open on an outage, probe at growing intervals, close on the
first success and release every waiter. On a virtual clock, so the intervals are exact."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog

from consumer.judge.breaker import CircuitBreaker
from consumer.ops.metrics import REGISTRY
from tests.support.virtual_clock import run_virtual


def circuit_open_gauge() -> float | None:
    return REGISTRY.get_sample_value("groundedness_circuit_open")


class ScriptedProbe:
    """Answers the breaker's probes from a script (the last answer repeats); records when."""

    def __init__(self, *answers: bool) -> None:
        self.answers = list(answers)
        self.at: list[float] = []

    async def __call__(self) -> bool:
        self.at.append(asyncio.get_running_loop().time())
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def test_a_new_breaker_is_closed_and_lets_calls_through() -> None:
    async def main() -> bool:
        breaker = CircuitBreaker(ScriptedProbe(True))
        await asyncio.wait_for(breaker.wait_closed(), 0.001)
        return breaker.is_open

    assert run_virtual(main()) is False


def test_a_trip_opens_the_circuit_once_and_says_why_on_one_line() -> None:
    async def main() -> tuple[bool, int, float | None, list[dict[str, Any]]]:
        breaker = CircuitBreaker(ScriptedProbe(False))
        with structlog.testing.capture_logs() as logs:
            breaker.trip("judge_http_503", status=503, param=None)
            breaker.trip("judge_http_503", status=503)  # while probing: the same outage
            breaker.trip("judge_timeout")
        gauge = circuit_open_gauge()
        is_open, trips = breaker.is_open, breaker.trips
        await breaker.close()
        return is_open, trips, gauge, [dict(event) for event in logs]

    is_open, trips, gauge, logs = run_virtual(main())
    assert is_open
    assert trips == 1
    assert gauge == 1
    assert logs == [{"event": "judge_circuit_open", "log_level": "warning",
                     "reason": "judge_http_503", "status": 503, "param": None}]


@pytest.mark.parametrize(
    ("first_delay_s", "max_delay_s", "failures", "probe_times"),
    [
        pytest.param(1.0, 30.0, 3, [1, 3, 7, 15], id="doubling"),
        pytest.param(1.0, 5.0, 5, [1, 3, 7, 12, 17, 22], id="capped"),
        pytest.param(2.0, 2.0, 2, [2, 4, 6], id="fixed"),
        pytest.param(0.5, 30.0, 0, [0.5], id="first-probe-succeeds"),
    ],
)
def test_probes_wait_a_doubling_capped_delay_until_one_succeeds(
    first_delay_s: float, max_delay_s: float, failures: int, probe_times: list[float]
) -> None:
    async def main() -> tuple[list[float], float, bool]:
        probe = ScriptedProbe(*[False] * failures, True)
        breaker = CircuitBreaker(probe, first_delay_s=first_delay_s, max_delay_s=max_delay_s)
        loop = asyncio.get_running_loop()
        tripped_at = loop.time()
        breaker.trip("outage")
        await breaker.wait_closed()
        return [t - tripped_at for t in probe.at], loop.time() - tripped_at, breaker.is_open

    at, closed_after_s, is_open = run_virtual(main())
    assert at == pytest.approx(probe_times)
    assert closed_after_s == pytest.approx(probe_times[-1])
    assert not is_open


def test_a_successful_probe_releases_every_waiter_and_resets_the_gauge() -> None:
    async def main() -> tuple[list[float], float | None, list[str]]:
        breaker = CircuitBreaker(ScriptedProbe(False, True), first_delay_s=1.0)
        breaker.trip("outage")
        loop = asyncio.get_running_loop()

        async def call() -> float:
            await breaker.wait_closed()
            return loop.time()

        with structlog.testing.capture_logs() as logs:
            released = await asyncio.gather(*(call() for _ in range(5)))
        return released, circuit_open_gauge(), [e["event"] for e in logs]

    released, gauge, events = run_virtual(main())
    assert released == pytest.approx([3.0] * 5)  # probes at 1 s (down) and 3 s (up)
    assert gauge == 0
    assert events == ["judge_circuit_closed"]


def test_a_second_outage_opens_again_and_probes_from_the_first_delay() -> None:
    async def main() -> tuple[int, list[float]]:
        probe = ScriptedProbe(False, False, True, False, True)
        breaker = CircuitBreaker(probe, first_delay_s=1.0)
        loop = asyncio.get_running_loop()
        breaker.trip("outage")
        await breaker.wait_closed()  # probes at 1, 3, 7
        second_at = loop.time()
        breaker.trip("outage")
        assert breaker.is_open
        await breaker.wait_closed()  # probes 1 s and 3 s after the second trip
        return breaker.trips, [t - second_at for t in probe.at[3:]]

    trips, second = run_virtual(main())
    assert trips == 2
    assert second == pytest.approx([1.0, 3.0])


def test_close_stops_probing_and_leaves_the_circuit_open() -> None:
    async def main() -> tuple[int, bool]:
        probe = ScriptedProbe(False)
        breaker = CircuitBreaker(probe, first_delay_s=1.0)
        breaker.trip("outage")
        await asyncio.sleep(3.5)  # probes at 1 and 3
        await breaker.close()
        await asyncio.sleep(60)
        return len(probe.at), breaker.is_open

    probes, is_open = run_virtual(main())
    assert probes == 2
    assert is_open, "a shutdown is not a recovery: nothing is released"


def test_close_without_a_trip_is_a_no_op() -> None:
    async def main() -> bool:
        breaker = CircuitBreaker(ScriptedProbe(True))
        await breaker.close()
        return breaker.is_open

    assert run_virtual(main()) is False


class RaisingProbe:
    """Raises on its first probes (a bug below the breaker), then answers True."""

    def __init__(self, raises: int) -> None:
        self.raises = raises
        self.calls = 0

    async def __call__(self) -> bool:
        self.calls += 1
        if self.calls <= self.raises:
            raise RuntimeError("probe bug")
        return True


def test_a_probe_that_raises_counts_as_failed_and_probing_goes_on() -> None:
    async def main() -> tuple[bool, int, list[str]]:
        probe = RaisingProbe(raises=2)
        breaker = CircuitBreaker(probe, first_delay_s=1.0, max_delay_s=4.0)
        with structlog.testing.capture_logs() as logs:
            breaker.trip("outage")
            await asyncio.wait_for(breaker.wait_closed(), 60)
        return breaker.is_open, probe.calls, [str(event["event"]) for event in logs]

    is_open, calls, events = run_virtual(main())
    assert not is_open
    assert calls == 3
    assert events.count("judge_probe_crashed") == 2
    assert events[-1] == "judge_circuit_closed"
