"""Results out: JSON, a markdown table, the throughput plot, and a comparison with a baseline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.targets import evaluate, headline

LABELS = {"worker": "groundedness worker", "batch-gather": "batch + gather",
          "sequential": "sequential"}
COLOURS = {"worker": "#1f77b4", "batch-gather": "#ff7f0e", "sequential": "#2ca02c"}


def write_json(results: dict[str, Any], path: Path) -> None:
    """The full results."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")


def _met(value: bool | None) -> str:
    return "—" if value is None else ("yes" if value else "**no**")


def markdown(results: dict[str, Any]) -> str:
    """The targets and the throughput sweep as markdown tables."""
    meta, config = results["meta"], results["config"]
    lines = [
        f"Measured {meta['started']} on {meta['cores']} cores (load average "
        f"{meta['load_before'][0]:.1f} before, {meta['load_after'][0]:.1f} after), "
        f"`{meta['mode']}` sizes, judge latency {config['latency_s']:g} s.",
        "",
        "| target | measured | bound | ratio | goal | met |",
        "|---|---|---|---:|---|---|",
    ]
    for row in evaluate(results):
        lines.append(f"| {row['target']} | {row['measured']} | {row['bound']} | "
                     f"{row['ratio']} | {row['goal']} | {_met(row['met'])} |")
    points = results.get("throughput", {}).get("points", [])
    if points:
        lines += ["", "| system | judge slots / batch | verdicts/s | Little's-law bound | "
                      "ratio | CPU cores |", "|---|---:|---:|---:|---:|---:|"]
        for point in points:
            bound = point["littles_law_bound"]
            name = LABELS.get(point["system"], point["system"])
            if point.get("jitter"):
                name += f", judge latency ±{point['jitter']:.0%}"
            lines.append(
                f"| {name} | {point['concurrency']} | "
                f"{point['verdicts_per_s']:.1f} | {bound:g} | "
                f"{point['verdicts_per_s'] / bound:.2f} | {point['cpu_cores_used']:.2f} |"
            )
    hangs = results.get("hangs")
    if hangs:
        lines += ["", f"With 1% of calls hanging until the {hangs['timeout_s']:g} s timeout "
                      f"({hangs['concurrency']} slots): hard-cap ceiling "
                      f"{hangs['ceiling']:.3f} of the no-hang rate.", "",
                  "| system | verdicts/s, no hangs | with hangs | ratio |", "|---|---:|---:|---:|"]
        for point in hangs["points"]:
            name = point["system"]
            lines.append(f"| {LABELS.get(name, name)} | {hangs['without'][name]:.1f} | "
                         f"{point['verdicts_per_s']:.1f} | {hangs['ratios'][name]:.3f} |")
    lines += _span_tables(results)
    return "\n".join(lines) + "\n"


def _span_tables(results: dict[str, Any]) -> list[str]:
    """The span throughput run: the read loop, the worker, the ceiling loop, the ceiling's
    parts."""
    spans = results.get("spans")
    if not spans:
        return []
    lines = ["", "Span throughput (`otlp_proto`, records of 100 spans, 95% without GenAI "
                 f"content, {spans['assembly']['TRACE_QUIET_SECONDS']} s quiet, instant judge):",
             "", "| system | records/s | spans/s | CPU ms per record | records per CPU-s | "
                 "waited for a CPU |", "|---|---:|---:|---:|---:|---:|"]
    systems = [("bare read loop", spans["read"]), ("groundedness worker", spans["worker"])]
    if "ceiling_loop" in spans:
        systems.append(("ceiling loop (`ceiling_loop.py`)", spans["ceiling_loop"]))
    for name, run in systems:
        lines.append(f"| {name} | {run['records_per_s']:.0f} | {run['spans_per_s']:,} | "
                     f"{run['cpu_ms_per_record']:.3f} | {run['records_per_cpu_s']:.0f} | "
                     f"{run['waited_for_cpu_share']:.0%} |")
    ceiling = spans["ceiling"]
    parts = ceiling["parts"]
    lines += ["", "| one-core ceiling, parts alone | CPU ms per record |", "|---|---:|",
              f"| read (the bare loop) | {parts['read_ms']:.3f} |",
              f"| decode (`decode_otlp`; the protobuf parse alone {parts['parse_ms']:.3f}) | "
              f"{parts['decode_ms']:.3f} |",
              f"| {parts['judged_per_record']:g} x judge path (map {parts['map_ms']:.3f}, "
              f"prompt, client, verdict: {parts['verdict_ms']:.3f} a trace) | "
              f"{parts['judged_per_record'] * parts['verdict_ms']:.3f} |",
              f"| **ceiling** | **{1000 / ceiling['records_per_cpu_s']:.3f}** = "
              f"{ceiling['records_per_cpu_s']:.0f} records per CPU-s |"]
    if "publish_ms" in parts:
        with_publish = ceiling["with_publish_records_per_cpu_s"]
        lines += [f"| {parts['judged_per_record']:g} x publishing a verdict (serialised, "
                  f"produced, acknowledged: {parts['publish_ms']:.3f} a verdict) | "
                  f"{parts['judged_per_record'] * parts['publish_ms']:.3f} |",
                  f"| **ceiling with publishing** | **{1000 / with_publish:.3f}** = "
                  f"{with_publish:.0f} records per CPU-s |"]
    return lines


def plot(results: dict[str, Any], path: Path) -> None:
    """Throughput against judge concurrency for the three systems (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = results.get("throughput", {}).get("points", [])
    if not points:
        return
    latency_s = results["config"]["latency_s"]
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    slots = sorted({p["concurrency"] for p in points if p["system"] != "sequential"})
    if slots:
        xs = [1, *slots]
        ax.plot(xs, [x / latency_s for x in xs], color="grey", linestyle=":",
                label=f"Little's law bound (slots / {latency_s:g} s)")
    for system in ("worker", "batch-gather"):
        mine = sorted((p["concurrency"], p["verdicts_per_s"]) for p in points
                      if p["system"] == system and not p.get("jitter"))
        if mine:
            ax.plot([c for c, _ in mine], [v for _, v in mine], marker="o",
                    color=COLOURS[system], label=LABELS[system])
    for point in points:
        if point["system"] == "sequential":
            ax.axhline(point["verdicts_per_s"], color=COLOURS["sequential"], linestyle="--",
                       label=f"sequential ({point['verdicts_per_s']:.1f}/s)")
    for point in points:
        if point.get("jitter"):
            ax.scatter([point["concurrency"]], [point["verdicts_per_s"]], marker="^", s=50,
                       facecolors="none", edgecolors=COLOURS["worker"], zorder=5,
                       label=f"worker, judge latency ±{point['jitter']:.0%}")
    for point in (results.get("hangs") or {}).get("points", []):
        ax.scatter([point["concurrency"]], [max(point["verdicts_per_s"], 0.1)], marker="x",
                   s=60, color=COLOURS.get(point["system"], "black"), zorder=5,
                   label=f"{LABELS.get(point['system'], point['system'])}, 1% hangs")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = sorted({1, *slots})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_xlabel("judge calls in flight (worker: JUDGE_MAX_CONCURRENCY; baseline: batch)")
    ax.set_ylabel("verdicts per second")
    meta = results["meta"]
    ax.set_title(f"Throughput, judge latency {latency_s:g} s ({meta['cores']} cores, "
                 f"load {meta['load_before'][0]:.1f})", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def medians(runs: list[dict[str, Any]]) -> str:
    """Each target over several runs: every run's ratio, and the median run's figures."""
    by_target: dict[str, list[dict[str, Any]]] = {}
    for results in runs:
        for row in evaluate(results):
            by_target.setdefault(row["target"], []).append(row)
    started = ", ".join(results["meta"]["started"] for results in runs)
    lines = [f"Medians of {len(runs)} runs ({started}).", "",
             "| target | ratio per run | median run: measured | median ratio | goal | met |",
             "|---|---|---|---:|---|---|"]
    for target, rows in by_target.items():
        ranked = sorted(rows, key=lambda row: row["ratio"])
        middle = ranked[(len(ranked) - 1) // 2]
        each = ", ".join(f"{row['ratio']}" for row in rows)
        lines.append(f"| {target} | {each} | {middle['measured']} | {middle['ratio']} | "
                     f"{middle['goal']} | {_met(middle['met'])} |")
    return "\n".join(lines) + "\n"


def compare(results: dict[str, Any], baseline: dict[str, Any]) -> str:
    """Each headline number of this run next to the baseline's, with the ratio."""
    now, before = headline(results), headline(baseline)
    def cell(value: float | None) -> str:
        return f"{value:10.2f}" if value is not None else f"{'—':>10}"

    lines = [f"{'metric':48} {'baseline':>10} {'now':>10} {'ratio':>7}"]
    for key in sorted(set(now) | set(before)):
        old, new = before.get(key), now.get(key)
        ratio = f"{new / old:7.3f}" if old and new is not None else "      —"
        lines.append(f"{key:48} {cell(old)} {cell(new)} {ratio}")
    return "\n".join(lines)
