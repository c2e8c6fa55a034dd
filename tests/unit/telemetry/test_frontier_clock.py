"""The live worker's span time: the records' timestamps, running with the wall clock only while
a partition is read to its end; a stamp far in the future does not move it."""

from __future__ import annotations

import time

import pytest

from consumer.telemetry import clock as clock_module
from consumer.telemetry.clock import MAX_AHEAD_S, FrontierClock


class Machine:
    """This machine's clocks, moved by the test."""

    def __init__(self) -> None:
        self.mono = 1_000.0
        self.wall = 1_800_000_000.0

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.wall


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> Machine:
    machine = Machine()
    monkeypatch.setattr(clock_module, "time", machine)
    return machine


def stamp(seconds: float) -> int:
    return int(seconds * 1000)


def test_time_runs_on_only_while_the_partition_is_read_to_its_end(machine: Machine) -> None:
    read_to_end = {"p": False}
    clock = FrontierClock(lambda tp: read_to_end[tp])
    base = machine.wall - 30  # a backlog: records written 30 s ago
    assert clock.arrival("p", 0, stamp(base)) == base
    machine.mono += 20  # lagging (or paused): 20 s of wall time pass, none of the records'
    assert clock.now("p") == base
    assert clock.arrival("p", 1, stamp(base + 1)) == base + 1, "the records' time moves it"
    read_to_end["p"] = True  # caught up: an absent span is absent now
    clock.now("p")
    machine.mono += 5
    assert clock.now("p") == base + 6
    read_to_end["p"] = False
    machine.mono += 50
    assert clock.now("p") == base + 6


def test_a_record_stamped_before_the_present_arrives_at_the_present(machine: Machine) -> None:
    clock = FrontierClock(lambda tp: False)
    clock.arrival("p", 0, stamp(machine.wall))
    # Another producer's clock is 3 s behind: its spans arrive now, not 3 s ago (a quiet
    # measured from their own stamps would close traces early).
    assert clock.arrival("p", 1, stamp(machine.wall - 3)) == machine.wall


def test_partitions_keep_their_own_time(machine: Machine) -> None:
    clock = FrontierClock(lambda tp: False)
    clock.arrival("a", 0, stamp(machine.wall))
    clock.arrival("b", 0, stamp(machine.wall - 100))
    assert clock.now("a") - clock.now("b") == 100


@pytest.mark.parametrize("stamped", [-1, "far-ahead"], ids=["no-timestamp", "far-ahead"])
def test_a_stamp_missing_or_far_ahead_does_not_move_time(
    machine: Machine, stamped: int | str,
) -> None:
    clock = FrontierClock(lambda tp: False)
    ahead = stamp(machine.wall + MAX_AHEAD_S + 3600) if stamped == "far-ahead" else -1
    assert clock.arrival("p", 0, ahead) == machine.wall, "a first record starts at the wall's"
    clock.arrival("p", 1, stamp(machine.wall + 1))
    assert clock.arrival("p", 2, ahead) == machine.wall + 1, "it would close every trace"


def test_a_revoked_partition_starts_again_from_its_records(machine: Machine) -> None:
    clock = FrontierClock(lambda tp: True)
    clock.arrival("p", 0, stamp(machine.wall))
    clock.forget("p")
    assert clock.now("p") == -float("inf")
    assert clock.arrival("p", 5, stamp(machine.wall - 10)) == machine.wall - 10


def test_the_real_clocks_are_used_without_a_test_double() -> None:
    clock = FrontierClock(lambda tp: True)
    now = time.time()
    assert abs(clock.arrival("p", 0, stamp(now)) - now) < 1
