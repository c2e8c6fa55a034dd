"""The pacing loop against a simulated account: N replicas, each pacing itself alone from the
headers of its own responses, converge to the account's limit without 429s; an endpoint
without headers is paced by its 429s."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import pytest

from consumer.judge.account import AccountState, Budget
from consumer.judge.pacing import Pacer


class Account:
    """OpenAI's request budget: a bucket of ``limit`` refilled at ``limit`` per minute."""

    def __init__(self, limit: int, full: bool = True) -> None:
        self.limit = limit
        self.level = float(limit) if full else 0.0
        self.at = 0.0
        self.admitted: list[float] = []
        self.refused = 0

    def call(self, now: float) -> tuple[bool, AccountState]:
        """Admitted or not (a 429), and the state the response's headers carry."""
        self.level = min(self.limit, self.level + (now - self.at) * self.limit / 60)
        self.at = now
        admitted = self.level >= 1
        if admitted:
            self.level -= 1
            self.admitted.append(now)
        else:
            self.refused += 1
        reset_s = (self.limit - self.level) * 60 / self.limit
        return admitted, AccountState(Budget(self.limit, int(self.level), reset_s), None)


@dataclass
class Replica:
    """A worker replica with a backlog: every free slot asks for a turn at once, and waits in
    line at the pacer's gate."""

    pacer: Pacer
    slots: int
    calls: int = 0
    waiting: int = 0
    gate_at: float | None = None  # when the gate looks again (an event is queued for it)


@dataclass(order=True)
class Event:
    at: float
    order: int
    replica: int = field(compare=False)
    kind: str = field(compare=False)  # "ask" (a slot is free) or "gate" (the pacer's gate)


def simulate(replicas: int, limit: int = 600, seconds: float = 240.0, latency_s: float = 0.3,
             slots: int = 16, headers: bool = True, joins: dict[int, float] | None = None,
             full: bool = True) -> tuple[Account, list[Replica]]:
    """Run the replicas against one account (``full``: as an idle one starts; else kept
    empty by others until now); ``joins``: replica -> when it starts."""
    now = [0.0]
    account = Account(limit, full)
    fleet = [Replica(Pacer(clock=lambda: now[0]), slots) for _ in range(replicas)]
    events: list[Event] = []
    order = 0

    def push(at: float, replica: int, kind: str) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, Event(at, order, replica, kind))

    def gate(index: int, at: float) -> None:
        replica = fleet[index]
        if replica.gate_at is None or at < replica.gate_at:
            replica.gate_at = at
            push(at, index, "gate")

    for index, replica in enumerate(fleet):
        for _ in range(replica.slots):
            push((joins or {}).get(index, 0.0), index, "ask")
    while events and events[0].at < seconds:
        event = heapq.heappop(events)
        now[0] = event.at
        replica = fleet[event.replica]
        if event.kind == "ask":
            replica.waiting += 1
            gate(event.replica, event.at)
            continue
        if replica.gate_at != event.at:
            continue  # superseded by an earlier look
        replica.gate_at = None
        while replica.waiting and (wait_s := replica.pacer.release_in_s()) == 0:
            replica.waiting -= 1
            replica.calls += 1
            admitted, state = account.call(event.at)
            if not admitted:  # a 429, answered at once; the trace waits its Retry-After
                replica.pacer.observe(state if headers else None)  # its headers, first
                replica.pacer.rate_limited()
                push(event.at + 0.15, event.replica, "ask")
            else:
                # The response comes back after the judge's latency, headers as at admission.
                push(event.at + latency_s, event.replica, "ask")
                replica.pacer.observe(state if headers else None)
        if replica.waiting:
            gate(event.replica, event.at + min(wait_s, 0.25))
    return account, fleet


def utilisation(account: Account, start_s: float, end_s: float) -> float:
    admitted = sum(start_s <= at < end_s for at in account.admitted)
    return admitted / ((end_s - start_s) * account.limit / 60)


@pytest.mark.parametrize("full", [True, False], ids=["idle-account", "empty-account"])
@pytest.mark.parametrize("replicas", [1, 3, 4])
def test_replicas_pacing_alone_use_the_account_and_meet_no_429s(replicas: int, full: bool) -> None:
    account, fleet = simulate(replicas, full=full)
    calls = sum(replica.calls for replica in fleet)
    assert account.refused / calls <= 0.01, (account.refused, calls)
    assert utilisation(account, 60.0, 240.0) >= 0.95
    assert all(replica.calls > 0 for replica in fleet)


def test_a_replica_that_joins_late_gets_its_share_and_the_account_holds() -> None:
    account, fleet = simulate(4, joins={3: 100.0}, seconds=300.0)
    calls = sum(replica.calls for replica in fleet)
    assert account.refused / calls <= 0.01
    assert utilisation(account, 150.0, 300.0) >= 0.95
    assert fleet[3].calls > 0.1 * calls / 4, "the latecomer is not starved"


def test_an_endpoint_without_headers_is_paced_by_its_429s() -> None:
    account, fleet = simulate(3, headers=False)
    calls = sum(replica.calls for replica in fleet)
    assert account.refused / calls <= 0.2, "429s on a fifth of the calls at most"
    assert utilisation(account, 60.0, 240.0) >= 0.8
    assert all(replica.pacer.rate is not None for replica in fleet)


def test_without_any_sign_of_a_limit_nothing_is_paced() -> None:
    pacer = Pacer(clock=lambda: 0.0)
    pacer.observe(None)
    assert pacer.rate is None
    assert pacer.release_in_s() == 0.0


def test_a_passing_429_on_every_seventh_call_does_not_bring_the_pace_down() -> None:
    """Without headers, 429s that do not follow the pace (a gateway's, noise) must not
    halve it again and again until nothing is sent."""
    now = [0.0]
    pacer = Pacer(clock=lambda: now[0])
    for n in range(2_000):  # 50 calls a second for 40 s, every 7th answered 429
        now[0] = n * 0.02
        assert pacer.release_in_s() == 0.0
        if n % 7 == 0:
            pacer.rate_limited()
        else:
            pacer.observe(None)
    assert pacer.rate is None, "never paced: 14% of calls is no account's limit"
