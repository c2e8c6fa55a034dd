"""The issue's targets, each computed from the results as a ratio against its bound."""

from __future__ import annotations

from typing import Any

EFFICIENCY_TARGET = 0.95
HANG_TARGET = 0.90
PEAK_RSS_TARGET_MB = 250.0
FLAT_RSS_MB_PER_MIN = 2.0
UTILISATION_TARGET = 0.90
STARTUP_TARGET_S = 2.0
SPAN_READ_TARGET = 0.5  # of the bare read loop's record rate
SPAN_CEILING_TARGET = 0.9  # of the one-core ceiling (span_ceiling.py)
SPAN_PEAK_RSS_TARGET_MB = 300.0
SPAN_FLAT_GROWTH = 0.05  # the second half's RSS peak over the first's (a saw: see span_scenarios)
SPAN_DELAY_EXCESS_S = 0.5  # over TRACE_QUIET_SECONDS + the judge's latency


def hang_ceiling(latency_s: float, timeout_s: float, hang_share: float) -> float:
    """Little's law with a hard cap of slots: throughput with hangs / without.

    Each slot serves calls of mean duration (1 - p) * latency + p * timeout instead of
    latency, so the ratio is latency / that mean, whatever the number of slots.
    """
    return latency_s / ((1 - hang_share) * latency_s + hang_share * timeout_s)


def max_timeout_for(ratio: float, latency_s: float, hang_share: float) -> float:
    """The longest timeout at which the hard-cap ceiling still reaches ``ratio``."""
    return latency_s * (1 / ratio - (1 - hang_share)) / hang_share


def _point(
    results: dict[str, Any], system: str, concurrency: int, jitter: float = 0.0
) -> dict[str, Any] | None:
    for point in results.get("throughput", {}).get("points", []):
        if (point["system"], point["concurrency"], point.get("jitter", 0.0)) == (
            system, concurrency, jitter
        ):
            return dict(point)
    return None


def evaluate(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target: what was measured, the bound, the ratio and whether it is met."""
    rows: list[dict[str, Any]] = []
    config = results["config"]
    concurrency, latency_s = config["target_concurrency"], config["latency_s"]
    worker = _point(results, "worker", concurrency)
    jittered = next((p for p in results.get("throughput", {}).get("points", [])
                     if p["system"] == "worker" and p.get("jitter")), None)
    if worker:
        bound = concurrency / latency_s
        ratio = worker["verdicts_per_s"] / bound
        asides = []
        if jittered:
            asides.append(f"latency ±{jittered['jitter']:.0%}: "
                          f"{jittered['verdicts_per_s'] / bound:.3f}")
        ceiling = next((c for c in results.get("judge_check", [])
                        if c["server"] == "asyncio" and c["latency_s"] == latency_s
                        and c["concurrency"] == concurrency), None)
        if ceiling and ceiling["efficiency"]:
            asides.append(f"the judge client alone, no Kafka: {ceiling['efficiency']:.3f}")
        aside = f" ({'; '.join(asides)})" if asides else ""
        rows.append({
            "target": "concurrency efficiency",
            "measured": f"{worker['verdicts_per_s']:.1f} verdicts/s at {concurrency} slots, "
                        f"{latency_s:g} s judge{aside}",
            "bound": f"{bound:.0f}/s (Little's law)",
            "ratio": round(ratio, 3),
            "goal": f">= {EFFICIENCY_TARGET}",
            "met": ratio >= EFFICIENCY_TARGET,
        })
    hangs = results.get("hangs")
    if hangs and worker:
        ceiling = hangs["ceiling"]
        with_hangs = {p["system"]: p for p in hangs["points"]}
        ratios = hangs["ratios"]
        parts = [f"{name} {ratios[name]:.2f}" for name in ("batch-gather", "sequential")
                 if name in ratios]
        rows.append({
            "target": "head-of-line robustness",
            "measured": f"{with_hangs['worker']['verdicts_per_s']:.1f}/s with 1% hangs "
                        f"({with_hangs['worker']['verdicts_per_s'] / (concurrency / latency_s):.2f}"
                        f" of the bound) vs {hangs['without']['worker']:.1f}/s without; others: "
                        + ", ".join(parts),
            "bound": f"hard-cap ceiling {ceiling:.3f}",
            "ratio": round(ratios["worker"], 3),
            "goal": f">= {HANG_TARGET}",
            "met": ratios["worker"] >= HANG_TARGET,
        })
    cost = results.get("cost")
    if cost:
        rows.append({
            "target": "cost (instant judge)",
            "measured": f"{cost['worker_verdicts_per_cpu_s']:.0f} verdicts per CPU-second",
            "bound": f"bare consume-produce-commit: {cost['bare_records_per_cpu_s']:.0f}/CPU-s",
            "ratio": round(cost["ratio"], 4),
            "goal": "report",
            "met": None,
        })
    memory = results.get("memory")
    if memory:
        slope = memory["rss_slope_mb_per_min"]
        flat = slope is not None and slope <= FLAT_RSS_MB_PER_MIN  # shrinking is flat enough
        rows.append({
            "target": "memory (backlog)",
            "measured": f"peak {memory['peak_rss_mb']:.0f} MB, slope {slope} MB/min over "
                        f"{memory['verdicts']} of {memory['backlog']} traces",
            "bound": f"{PEAK_RSS_TARGET_MB:.0f} MB, flat",
            "ratio": round(memory["peak_rss_mb"] / PEAK_RSS_TARGET_MB, 3),
            "goal": f"<= 1 and slope <= {FLAT_RSS_MB_PER_MIN} MB/min",
            "met": memory["peak_rss_mb"] <= PEAK_RSS_TARGET_MB and flat,
        })
    rate = results.get("rate_limit")
    if rate:
        rows.append({
            "target": "rate limit",
            "measured": f"busiest {rate['window_s']:g} s window {rate['busiest_window_calls']} "
                        f"calls; first window {rate['first_window_calls']}",
            "bound": f"{rate['allowed_per_window']:g} per {rate['window_s']:g} s "
                     f"({rate['requests_per_minute']}/min)",
            "ratio": rate["utilisation"],
            "goal": f"never above; utilisation >= {UTILISATION_TARGET}",
            "met": rate["within_limit"] and rate["utilisation"] >= UTILISATION_TARGET,
        })
    startup = results.get("startup")
    if startup:
        seconds = startup["first_judge_call_s"]
        rows.append({
            "target": "startup",
            "measured": f"{seconds:.2f} s to the first judge call (median of "
                        f"{len(startup['runs'])})",
            "bound": f"{STARTUP_TARGET_S:g} s",
            "ratio": round(seconds / STARTUP_TARGET_S, 3),
            "goal": "<= 1",
            "met": seconds <= STARTUP_TARGET_S,
        })
    rows += span_rows(results)
    return rows


def span_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The span scenarios' targets (``TRACES_FORMAT=otlp_proto``)."""
    rows: list[dict[str, Any]] = []
    spans = results.get("spans")
    if spans:
        worker, read, ceiling = spans["worker"], spans["read"], spans["ceiling"]
        rows.append({
            "target": "span throughput",
            "measured": f"{worker['records_per_s']:.0f} records/s = {worker['spans_per_s']:,} "
                        f"spans/s through one worker ({worker['verdicts']} verdicts)",
            "bound": f"bare read loop {read['records_per_s']:.0f} records/s "
                     f"({read['spans_per_s']:,} spans/s)",
            "ratio": spans["ratio_to_read"],
            "goal": f">= {SPAN_READ_TARGET}",
            "met": (spans["ratio_to_read"] or 0) >= SPAN_READ_TARGET,
        })
        parts = ceiling["parts"]
        rows.append({
            "target": "span throughput, one-core ceiling",
            "measured": f"{worker['records_per_cpu_s']:.0f} records per CPU-second "
                        f"({worker['cpu_ms_per_record']:.3f} ms each); wall: "
                        f"{spans['wall_ratio_to_ceiling']:.3f} of it, waiting for a CPU "
                        f"{worker['waited_for_cpu_share']:.0%} of the time",
            "bound": f"{ceiling['records_per_cpu_s']:.0f}/CPU-s: read {parts['read_ms']:.3f} + "
                     f"decode {parts['decode_ms']:.3f} + {parts['judged_per_record']:g} x judge "
                     f"path {parts['verdict_ms']:.3f} ms",
            "ratio": spans["ratio_to_ceiling"],
            "goal": f">= {SPAN_CEILING_TARGET}",
            "met": (spans["ratio_to_ceiling"] or 0) >= SPAN_CEILING_TARGET,
        })
        if "ceiling_loop" in spans:  # runs since the ceiling's parts were run as a loop
            loop = spans["ceiling_loop"]
            rows.append({
                "target": "span throughput, ceiling loop",
                "measured": f"{worker['records_per_cpu_s']:.0f} records per CPU-second "
                            f"({worker['cpu_ms_per_record']:.3f} ms each); wall: "
                            f"{spans['wall_ratio_to_ceiling_loop']:.3f} of its rate",
                "bound": f"{loop['records_per_cpu_s']:.0f}/CPU-s ({loop['cpu_ms_per_record']:.3f}"
                         f" ms each, {loop['records_per_s']:.0f} records/s): the ceiling's parts"
                         f" run as one loop, {loop['verdicts']} verdicts",
                "ratio": spans["ratio_to_ceiling_loop"],
                "goal": f">= {SPAN_CEILING_TARGET}",
                "met": (spans["ratio_to_ceiling_loop"] or 0) >= SPAN_CEILING_TARGET,
            })
        if "ratio_to_ceiling_with_publish" in spans:  # runs since publishing was measured
            rows.append({
                "target": "span throughput, one-core ceiling with publishing",
                "measured": f"{worker['records_per_cpu_s']:.0f} records per CPU-second "
                            f"({worker['cpu_ms_per_record']:.3f} ms each)",
                "bound": f"{ceiling['with_publish_records_per_cpu_s']:.0f}/CPU-s: the "
                         f"ceiling's parts + {parts['judged_per_record']:g} x publish "
                         f"{parts['publish_ms']:.3f} ms",
                "ratio": spans["ratio_to_ceiling_with_publish"],
                "goal": f">= {SPAN_CEILING_TARGET}",
                "met": (spans["ratio_to_ceiling_with_publish"] or 0) >= SPAN_CEILING_TARGET,
            })
    memory = results.get("spans_memory")
    if memory:
        first, growth = memory["first_half_peak_mb"], memory["growth_mb"]
        flat = growth is not None and growth <= SPAN_FLAT_GROWTH * first
        cap = memory["assembly"]["MAX_OPEN_TRACES"]
        rows.append({
            "target": "span memory",
            "measured": f"peak {memory['peak_rss_mb']:.0f} MB; second half's peak {growth:+} MB "
                        f"on the first's ({first:.0f} MB) over {memory['spans']:,} spans, "
                        f"MAX_OPEN_TRACES={cap} (most open at a pause: "
                        f"{memory['most_open_traces']})",
            "bound": f"{SPAN_PEAK_RSS_TARGET_MB:.0f} MB, flat",
            "ratio": round(memory["peak_rss_mb"] / SPAN_PEAK_RSS_TARGET_MB, 3),
            "goal": f"<= 1 and growth <= {SPAN_FLAT_GROWTH:.0%}",
            "met": memory["peak_rss_mb"] <= SPAN_PEAK_RSS_TARGET_MB and flat
            and memory["finished"],
        })
    delay = results.get("spans_delay")
    if delay and delay["excess_max_s"] is not None:
        quiet = delay["assembly"]["TRACE_QUIET_SECONDS"]
        rows.append({
            "target": "span delay",
            "measured": f"last span to verdict, beyond {quiet} s quiet + "
                        f"{delay['judge_latency_s']:g} s judge: p50 {delay['excess_p50_s']} s, "
                        f"p95 {delay['excess_p95_s']} s, max {delay['excess_max_s']} s "
                        f"({delay['matched']} traces)",
            "bound": f"{SPAN_DELAY_EXCESS_S:g} s for every trace",
            "ratio": round(delay["excess_max_s"] / SPAN_DELAY_EXCESS_S, 3),
            "goal": "max < 1",
            "met": delay["excess_max_s"] < SPAN_DELAY_EXCESS_S
            and delay["matched"] == delay["verdicts_expected"],
        })
    return rows


def headline(results: dict[str, Any]) -> dict[str, float]:
    """Flat numbers to compare between two runs (``--baseline``)."""
    numbers: dict[str, float] = {}
    for point in results.get("throughput", {}).get("points", []):
        jitter = f"±{point['jitter']:.0%}" if point.get("jitter") else ""
        key = f"throughput.{point['system']}@{point['concurrency']}{jitter}"
        numbers[key] = point["verdicts_per_s"]
    for point in (results.get("hangs") or {}).get("points", []):
        numbers[f"hangs.{point['system']}@{point['concurrency']}"] = point["verdicts_per_s"]
    if cost := results.get("cost"):
        numbers["cost.worker_verdicts_per_cpu_s"] = cost["worker_verdicts_per_cpu_s"]
        numbers["cost.bare_records_per_cpu_s"] = cost["bare_records_per_cpu_s"]
    if memory := results.get("memory"):
        numbers["memory.peak_rss_mb"] = memory["peak_rss_mb"]
        numbers["memory.verdicts_per_s"] = memory["verdicts_per_s"]
    if rate := results.get("rate_limit"):
        numbers["rate_limit.utilisation"] = rate["utilisation"]
    if startup := results.get("startup"):
        numbers["startup.first_judge_call_s"] = startup["first_judge_call_s"]
    if spans := results.get("spans"):
        numbers["spans.worker_records_per_s"] = spans["worker"]["records_per_s"]
        numbers["spans.worker_records_per_cpu_s"] = spans["worker"]["records_per_cpu_s"]
        numbers["spans.read_records_per_s"] = spans["read"]["records_per_s"]
        numbers["spans.ceiling_records_per_cpu_s"] = spans["ceiling"]["records_per_cpu_s"]
        numbers["spans.decode_ms"] = spans["ceiling"]["parts"]["decode_ms"]
        if "ceiling_loop" in spans:
            numbers["spans.ceiling_loop_records_per_cpu_s"] = (
                spans["ceiling_loop"]["records_per_cpu_s"])
        if "publish_ms" in spans["ceiling"]["parts"]:
            numbers["spans.publish_ms"] = spans["ceiling"]["parts"]["publish_ms"]
    if span_memory := results.get("spans_memory"):
        numbers["spans_memory.peak_rss_mb"] = span_memory["peak_rss_mb"]
    if span_delay := results.get("spans_delay"):
        numbers["spans_delay.excess_p95_s"] = span_delay["excess_p95_s"]
        numbers["spans_delay.excess_max_s"] = span_delay["excess_max_s"]
    for check in results.get("judge_check", []):
        key = f"judge_check.{check['server']}@{check['latency_s']:g}s"
        numbers[key] = check["requests_per_s"]
    return numbers
