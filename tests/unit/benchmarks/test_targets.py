"""The benchmark's arithmetic: Little's-law ceilings, the targets' verdicts, medians of runs.

The benchmark itself runs outside the test suite (``make bench``); these pin the formulas its
ratios come from, on hand-computed inputs.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.report import medians
from benchmarks.targets import evaluate, hang_ceiling, max_timeout_for


def test_hang_ceiling_is_littles_law_with_a_hard_cap() -> None:
    # 0.5 / (0.99 * 0.5 + 0.01 * 10) = 0.5 / 0.595
    assert hang_ceiling(0.5, 10.0, 0.01) == pytest.approx(0.8403, abs=1e-4)
    assert hang_ceiling(0.5, 0.5, 0.01) == pytest.approx(1.0)


def test_max_timeout_inverts_the_ceiling() -> None:
    timeout = max_timeout_for(0.9, 0.5, 0.01)
    assert timeout == pytest.approx(6.0556, abs=1e-4)  # 0.5 * (1/0.9 - 0.99) / 0.01
    assert hang_ceiling(0.5, timeout, 0.01) == pytest.approx(0.9)


def run(worker_rate: float, startup_s: float, started: str) -> dict[str, Any]:
    """A minimal results dict: the 64-slot worker point and a startup figure."""
    point = {"system": "worker", "concurrency": 64, "jitter": 0.0,
             "verdicts_per_s": worker_rate}
    return {
        "meta": {"started": started},
        "config": {"target_concurrency": 64, "latency_s": 0.5},
        "throughput": {"points": [point]},
        "startup": {"first_judge_call_s": startup_s, "runs": [{}, {}, {}]},
    }


def test_targets_are_ratios_against_their_bounds() -> None:
    rows = {row["target"]: row for row in evaluate(run(121.6, 2.2, "a"))}
    assert rows["concurrency efficiency"]["ratio"] == 0.95  # 121.6 / (64 / 0.5)
    assert rows["concurrency efficiency"]["met"] is True
    assert rows["startup"]["ratio"] == 1.1
    assert rows["startup"]["met"] is False


def test_medians_report_the_middle_run_of_each_target() -> None:
    runs = [run(115.2, 1.8, "a"), run(124.8, 2.4, "b"), run(121.6, 1.9, "c")]
    table = medians(runs)
    efficiency = next(line for line in table.splitlines() if "concurrency" in line)
    startup = next(line for line in table.splitlines() if line.startswith("| startup"))
    # efficiency 0.9, 0.975, 0.95 -> the median run is the third, which meets >= 0.95
    assert "| 0.9, 0.975, 0.95 |" in efficiency
    assert efficiency.endswith("| 0.95 | >= 0.95 | yes |")
    # startup 0.9, 1.2, 0.95 of 2 s -> the median run is 1.9 s
    assert "1.90 s" in startup
    assert startup.endswith("| 0.95 | <= 1 | yes |")
