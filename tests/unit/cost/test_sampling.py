"""SAMPLE_RATE: the measured rate over 100,000 real-shaped ids, decisions pinned across hash
changes and processes, and a raised rate keeping every trace it kept before."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer.cost.sampling import sample_point, sampled

N = 100_000
RATES = [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.9, 0.99]


def _otel(rng: random.Random, k: int) -> str:
    return f"{rng.getrandbits(128):032x}"  # OTel trace ids: 32 lowercase hex


def _uuid(rng: random.Random, k: int) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _sequential(rng: random.Random, k: int) -> str:
    return str(10**15 + k)  # Datadog-style integer ids, read as decimal strings, in order


def _free_form(rng: random.Random, k: int) -> str:
    return f"session-{k % 977}/turn-{k}"  # an application's own ids, nearly alike


SHAPES: dict[str, Callable[[random.Random, int], str]] = {
    "otel": _otel, "uuid": _uuid, "sequential": _sequential, "free_form": _free_form,
}


@pytest.fixture(scope="module", params=sorted(SHAPES))
def points(request: pytest.FixtureRequest) -> list[int]:
    rng = random.Random(14)
    make = SHAPES[request.param]
    return [sample_point(make(rng, k)) for k in range(N)]


@pytest.mark.parametrize("rate", RATES)
def test_the_measured_rate_is_within_one_point_of_the_sample_rate(
        points: list[int], rate: float) -> None:
    kept = sum(point < rate * 2**64 for point in points) / N
    assert abs(kept - rate) <= 0.01
    # And as close as a fair coin gets: within 4 standard deviations of a binomial.
    assert abs(kept - rate) <= 4 * math.sqrt(rate * (1 - rate) / N)


def test_sampled_agrees_with_the_points() -> None:
    ids = [f"{random.Random(k).getrandbits(128):032x}" for k in range(2_000)]
    for rate in (0.1, 0.5):
        assert [sampled(i, rate) for i in ids] == [sample_point(i) < rate * 2**64 for i in ids]


# A change of hash, key, digest size or encoding moves traces in or out of every team's
# sample: these decisions were recorded once and must not move.
PINNED = [
    ("4bf92f3577b34da6a3ce929d0e0e4736", 0x1AC396BC26D7788D),
    ("0af7651916cd43dd8448eb211c80319c", 0xD8C7BF74102C9614),
    ("order-1", 0x44BE4CF5D0759964),
    ("12345678901234567890", 0xFA52D76D7418A0EE),
    ("chat/ä🙂", 0x483B31EB404D5B78),
    ("\ud800", 0x82A009891FEAF6DC),  # a lone surrogate, as JSON "\ud800" decodes
]
PINNED_DECISIONS = [
    ("4bf92f3577b34da6a3ce929d0e0e4736", 0.1, False),
    ("4bf92f3577b34da6a3ce929d0e0e4736", 0.11, True),
    ("0af7651916cd43dd8448eb211c80319c", 0.8, False),
    ("0af7651916cd43dd8448eb211c80319c", 0.85, True),
    ("order-1", 0.25, False),
    ("order-1", 0.3, True),
    ("12345678901234567890", 0.97, False),
    ("12345678901234567890", 0.98, True),
    ("chat/ä🙂", 0.28, False),
    ("chat/ä🙂", 0.29, True),
]


@pytest.mark.parametrize(("trace_id", "point"), PINNED)
def test_the_hash_of_an_id_is_pinned(trace_id: str, point: int) -> None:
    assert sample_point(trace_id) == point


@pytest.mark.parametrize(("trace_id", "rate", "decision"), PINNED_DECISIONS)
def test_decisions_are_pinned(trace_id: str, rate: float, decision: bool) -> None:
    assert sampled(trace_id, rate) is decision


def test_another_process_with_another_hash_seed_decides_the_same() -> None:
    ids = [pinned for pinned, _ in PINNED[:5]] + [f"t-{k}" for k in range(200)]
    here = [sampled(i, 0.5) for i in ids]
    script = ("import json, sys; from consumer.cost.sampling import sampled; "
              "print(json.dumps([sampled(i, 0.5) for i in json.load(sys.stdin)]))")
    for seed in ("1", "2"):
        run = subprocess.run(
            [sys.executable, "-c", script], input=json.dumps(ids), capture_output=True,
            text=True, check=True, env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert json.loads(run.stdout) == here
    assert 50 < sum(here) < 155  # a real mix, not all one way


def test_rate_one_keeps_every_trace_and_zero_none() -> None:
    ids = ["", "x", "4bf92f3577b34da6a3ce929d0e0e4736", *(str(k) for k in range(1_000))]
    assert all(sampled(i, 1.0) for i in ids)
    assert not any(sampled(i, 0.0) for i in ids)


@pytest.mark.parametrize("rate", [-0.1, 1.5, math.nan, math.inf])
def test_a_rate_outside_zero_to_one_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="sample rate must be within 0-1"):
        sampled("t", rate)


@given(st.text(max_size=64), st.floats(0, 1), st.floats(0, 1))
def test_a_raised_rate_keeps_every_trace_it_kept(trace_id: str, a: float, b: float) -> None:
    low, high = min(a, b), max(a, b)
    if sampled(trace_id, low):
        assert sampled(trace_id, high)


def test_raising_the_rate_over_many_ids_only_adds(points: list[int]) -> None:
    kept_before = {k for k, point in enumerate(points) if point < 0.1 * 2**64}
    kept_after = {k for k, point in enumerate(points) if point < 0.25 * 2**64}
    assert kept_before < kept_after


def test_rules_salted_apart_pick_different_traces_at_the_same_rate() -> None:
    """Two rules at 0.3 each keep 30%, and overlap as independent draws do (9%), not wholly;
    the empty salt is the unsalted hash the judge's SAMPLE_RATE has always drawn."""
    rng = random.Random(29)
    ids = [_otel(rng, k) for k in range(20_000)]
    judge = {t for t in ids if sampled(t, 0.3)}
    rule = {t for t in ids if sampled(t, 0.3, "missing_citation")}
    assert judge == {t for t in ids if sample_point(t) < 0.3 * 2**64}
    assert judge == {t for t in ids if sampled(t, 0.3, "")}
    for kept in (judge, rule):
        assert abs(len(kept) / len(ids) - 0.3) <= 4 * math.sqrt(0.21 / len(ids))
    assert abs(len(judge & rule) / len(ids) - 0.09) <= 4 * math.sqrt(0.09 * 0.91 / len(ids))
