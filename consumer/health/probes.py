"""The health probes' decisions (pure): liveness and readiness from one ``HealthState``.

Liveness (``/healthz``): alive while the fetch loop is not wedged. The pipeline calls
``getmany`` at least every 200 ms, even with every partition paused, and stamps
``last_fetch_at``; a stamp older than ``wedged_after_s`` means the loop is stuck, unless the
worker is draining or Kafka is known to be unreachable (a commit then waits for the broker,
and a restart would not bring the broker back).

Readiness (``/readyz``): ready only when the consumer has started, the worker is not
draining, the broker answered a check recently, the consumer has joined its group (its
assignment may be empty: a surplus replica is still a healthy member and must not stall a
rollout), and every owned partition could be started (exactly once: its transactional
producer).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Check:
    """The answer of one probe: healthy or not, and why (one line)."""

    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class HealthState:
    """What the probes decide from; times are ``time.monotonic()`` seconds."""

    last_fetch_at: float | None  # None until the pipeline runs (the consumer has started)
    draining: bool
    joined: bool
    kafka_ok_at: float | None  # the last check the broker answered
    kafka_error: str | None  # why the latest check failed; None when it succeeded
    waiting: dict[str, str] = field(default_factory=dict)  # owned, not started yet: why


def kafka_reachable(state: HealthState, now: float, stale_after_s: float) -> bool:
    """Did the broker answer the latest check, recently enough?"""
    return (
        state.kafka_error is None
        and state.kafka_ok_at is not None
        and now - state.kafka_ok_at <= stale_after_s
    )


def liveness(state: HealthState, now: float, *, wedged_after_s: float,
             stale_after_s: float) -> Check:
    """Alive unless the fetch loop has stopped ticking for a reason Kafka does not explain."""
    if state.last_fetch_at is None:
        return Check(True, "starting")
    if state.draining:
        return Check(True, "draining")
    idle_s = now - state.last_fetch_at
    if idle_s <= wedged_after_s:
        return Check(True, "ok")
    if not kafka_reachable(state, now, stale_after_s):
        return Check(True, f"fetch loop waiting {idle_s:.0f} s for an unreachable Kafka")
    return Check(False, f"fetch loop stuck: no fetch for {idle_s:.0f} s")


def readiness(state: HealthState, now: float, *, stale_after_s: float) -> Check:
    """Ready once started, joined and talking to the broker; never while draining."""
    if state.draining:
        return Check(False, "draining")
    if state.last_fetch_at is None:
        return Check(False, "starting: connecting to Kafka")
    if state.kafka_ok_at is None and state.kafka_error is None:
        return Check(False, "starting: first broker check pending")
    if not kafka_reachable(state, now, stale_after_s):
        return Check(False, f"kafka unreachable: {state.kafka_error or 'no recent answer'}")
    if not state.joined:
        return Check(False, "joining the consumer group")
    if state.waiting:
        partition, why = min(state.waiting.items())
        return Check(False, f"{len(state.waiting)} partition(s) not started, {partition}: {why}")
    return Check(True, "ready")
