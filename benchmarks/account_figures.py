"""The figures of ``benchmarks.account`` from what one run recorded (pure), and their table.

Utilisation is the account's: requests admitted per second over the bucket's refill per
second, in the steady part of the run (the time between the first and the last request the
account admitted, its first and last ``TRIM`` cut off: start-up, rebalances, the tail). Above 1, the
bucket was spending a burst it had stored (an idle account starts full): how much of it went
in the steady part is given beside (``bucket_drained_in_steady``, replayed exactly from the
admit times; negative when the bucket filled up instead, the account not being the limit).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from statistics import median
from typing import Any

from consumer.localjudge.buckets import Bucket

TRIM = 0.1


def steady_window(admitted_at: Sequence[float], trim: float = TRIM) -> tuple[float, float]:
    """The steady part of a run: the admit times' span without its first and last ``trim``."""
    if not admitted_at:
        return 0.0, 0.0
    first, last = min(admitted_at), max(admitted_at)
    cut = (last - first) * trim
    return first + cut, last - cut


def bucket_levels(
    admitted_at: Sequence[float], per_minute: int, created_at: float, full: bool,
    instants: Sequence[float],
) -> list[float]:
    """The requests bucket's level at each of ``instants``, replaying the admits through it."""
    bucket = Bucket(per_minute, created_at, None if full else 0.0)
    levels, times = [], sorted(admitted_at)
    low = 0
    for instant in sorted(instants):
        while low < len(times) and times[low] < instant:
            bucket.take(times[low], 1)
            low += 1
        levels.append(bucket.level(instant))
    return levels


def utilisation(
    admitted_at: Sequence[float], per_minute: int, created_at: float, full: bool
) -> dict[str, Any]:
    """Admitted per second in the steady window over the refill; what the bucket lost in it."""
    start, end = steady_window(admitted_at)
    length = end - start
    rate = per_minute / 60
    if length <= 0:
        return {"steady_s": 0.0, "admitted_per_s": None, "refill_per_s": rate,
                "utilisation": None, "bucket_drained_in_steady": None}
    admitted = sum(1 for at in admitted_at if start <= at < end)
    at_start, at_end = bucket_levels(admitted_at, per_minute, created_at, full, [start, end])
    return {
        "steady_s": round(length, 1),
        "admitted_per_s": round(admitted / length, 3),
        "refill_per_s": round(rate, 3),
        "utilisation": round(admitted / (rate * length), 4),
        "bucket_drained_in_steady": round(at_start - at_end, 1),
    }


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0-1), nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def verdict_figures(verdicts: Sequence[dict[str, Any]], expected: set[str]) -> dict[str, Any]:
    """Missing and error verdicts, duplicates, and the time to a verdict (``latency_ms``: from
    the first attempt to the answer, limiter waits and retries included)."""
    first: dict[str, dict[str, Any]] = {}
    for verdict in verdicts:
        first.setdefault(verdict["trace_id"], verdict)
    errors = Counter((v.get("error") or {}).get("kind", "?") for v in first.values()
                     if v["verdict"] == "error")
    latencies = [v["latency_ms"] / 1000 for v in first.values() if v["verdict"] != "error"]
    return {
        "verdicts": len(first),
        "missing": len(expected - set(first)),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "duplicates": len(verdicts) - len(first),
        "time_to_verdict_median_s": round(median(latencies), 2) if latencies else None,
        "time_to_verdict_p95_s": round(p95, 2) if (p95 := percentile(latencies, 0.95))
        is not None else None,
    }


def log_figures(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """From the workers' JSON log lines: circuit openings (by reason), failed probes."""
    opened = [e for e in events if e.get("event") == "judge_circuit_open"]
    return {
        "circuit_openings": len(opened),
        "circuit_reasons": dict(Counter(str(e.get("reason")) for e in opened)),
        "circuit_closings": sum(1 for e in events if e.get("event") == "judge_circuit_closed"),
        "probes_failed": sum(1 for e in events if e.get("event") == "judge_probe_failed"),
    }


PERCENT = "{:.1%}"
ROWS = (  # (title, key, format)
    ("judge calls", "calls", "{:,}"),
    ("answered 429", "calls_429", "{:,}"),
    ("429 share of calls", "share_429", PERCENT),
    ("probes", "probes", "{:,}"),
    ("steady part (s)", "steady_s", "{:g}"),
    ("admitted/s in it (refill/s)", "admitted_per_s", "{:.2f}"),
    ("utilisation (of refill)", "utilisation", PERCENT),
    ("bucket drained in it", "bucket_drained_in_steady", "{:g}"),
    ("circuit openings", "circuit_openings", "{:,}"),
    ("verdicts missing", "missing", "{:,}"),
    ("error verdicts", "errors", "{:,}"),
    ("time to verdict p50 (s)", "time_to_verdict_median_s", "{:.2f}"),
    ("time to verdict p95 (s)", "time_to_verdict_p95_s", "{:.2f}"),
    ("wall time (s)", "wall_s", "{:.0f}"),
)


def table(runs: Sequence[dict[str, Any]]) -> str:
    """The runs side by side, one column per replica count, as Markdown."""
    head = "| | " + " | ".join(f"{r['label']} replicas" for r in runs) + " |"
    lines = [head, "|---" * (len(runs) + 1) + "|"]
    for title, key, form in ROWS:
        cells = ["-" if run.get(key) is None else form.format(run[key]) for run in runs]
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
