"""The shared-account benchmark's arithmetic (``benchmarks/account_figures.py``), by hand.

The benchmark itself runs outside the test suite (``python -m benchmarks.account``).
"""

from __future__ import annotations

import pytest

from benchmarks.account_figures import (
    bucket_levels,
    log_figures,
    percentile,
    steady_window,
    table,
    utilisation,
    verdict_figures,
)


def test_the_steady_window_cuts_a_tenth_off_each_end() -> None:
    assert steady_window([10.0, 50.0, 110.0]) == (20.0, 100.0)
    assert steady_window([]) == (0.0, 0.0)


def test_bucket_levels_replay_the_admits() -> None:
    # 60/min: one a second. Empty at 0, three admitted at 5 s: 5 - 3 = 2 left, 7 at 10 s.
    assert bucket_levels([5.0, 5.0, 5.0], 60, 0.0, False, [4.0, 10.0]) == pytest.approx(
        [4.0, 7.0])
    assert bucket_levels([1.0], 60, 0.0, True, [2.0]) == pytest.approx([60.0])  # capped


def test_utilisation_is_admitted_over_refill_in_the_steady_part() -> None:
    admitted = [i * 0.2 for i in range(501)]  # 5 a second for 100 s, at an account of 10/s
    figures = utilisation(admitted, 600, 0.0, False)
    assert figures["steady_s"] == 80.0
    assert figures["utilisation"] == pytest.approx(0.5, abs=0.01)
    assert figures["bucket_drained_in_steady"] < 0  # it filled up: the account was not the limit


def test_verdict_figures_count_the_first_verdict_of_each_trace() -> None:
    verdicts = [
        {"trace_id": "a", "verdict": "pass", "latency_ms": 1000},
        {"trace_id": "a", "verdict": "pass", "latency_ms": 9000},  # a duplicate
        {"trace_id": "b", "verdict": "error", "latency_ms": 5, "error": {"kind": "judge_x"}},
        {"trace_id": "c", "verdict": "fail", "latency_ms": 3000},
    ]
    figures = verdict_figures(verdicts, {"a", "b", "c", "d"})
    assert (figures["missing"], figures["errors"], figures["duplicates"]) == (1, 1, 1)
    assert figures["error_kinds"] == {"judge_x": 1}
    assert (figures["time_to_verdict_median_s"], figures["time_to_verdict_p95_s"]) == (2.0, 3.0)
    assert percentile([], 0.5) is None


def test_circuit_openings_come_from_the_workers_log_events() -> None:
    events = [{"event": "judge_circuit_open", "reason": "judge_rate_limited"},
              {"event": "judge_probe_failed"}, {"event": "judge_circuit_closed"},
              {"event": "partitions_assigned"}]
    assert log_figures(events) == {"circuit_openings": 1,
                                   "circuit_reasons": {"judge_rate_limited": 1},
                                   "circuit_closings": 1, "probes_failed": 1}


def test_the_table_puts_runs_side_by_side() -> None:
    text = table([{"label": "1", "calls": 1200, "share_429": 0.0, "utilisation": 0.9676},
                  {"label": "3", "calls": 2220, "share_429": 0.455}])
    assert text.splitlines()[0] == "| | 1 replicas | 3 replicas |"
    assert "| judge calls | 1,200 | 2,220 |" in text
    assert "| 429 share of calls | 0.0% | 45.5% |" in text
    assert "| utilisation (of refill) | 96.8% | - |" in text
