"""A replay's summary and its table: the counted verdicts (``cost/verdict_tally.py``), or a dry
run's counts and estimate (``dry_run.py``), and a span topic's traces and spans.

``pass``, ``fail`` and ``error`` are totals over every rule; ``rules`` gives each rule of
``RULES`` its own (a dry run: each deterministic rule's, run for real, and how many traces
``groundedness`` would judge). ``records`` counts records, however many verdicts each trace
got; a trace with an answer that no rule applies to is ``not_applicable``.

What the cost controls left out is counted by reason, as ``groundedness_skipped_total`` counts
it: ``skipped`` (an empty output; from spans, also an answer found nowhere), ``filtered``
(``TRACE_FILTER``: no verdict at all) and ``sampled_out`` (``SAMPLE_RATE``: no judged
verdict; the deterministic rules' are counted with their rules). The judge's ``cache_hits``,
``tokens`` and ``cost_usd`` (null without ``JUDGE_PRICE_*``) are summed from the published
verdicts; a dry run's are its estimate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.table import Table

from consumer.cost.pricing import CONFIGURED_PRICES, FALLBACK_PRICE, format_usd
from consumer.cost.verdict_tally import Tally
from consumer.evaluation.calibration import percentile
from schemas.verdict import RULE

if TYPE_CHECKING:  # types only; keeps aiokafka and protobuf out of `groundedness --help`
    from consumer.replay.dry_run import DryRun
    from consumer.telemetry.assembly import AssemblyCounts

SCORE_KEYS = ("0.00", "0.25", "0.50", "0.75", "1.00")
# The dry run's fallback price without JUDGE_PRICE_* (``--price-per-million-tokens``):


@dataclass(frozen=True, slots=True)
class SpanWindow:
    """A span topic's window beyond its verdicts: the traces it assembled and how they
    closed, those left open at the topic's end, its spans kept and dropped, and the records
    read past ``--to`` for its traces."""

    counts: AssemblyCounts
    no_candidate: int  # traces with no LLM call nor an answer with documents: nothing to judge
    read_on: int

    def summary(self) -> dict[str, Any]:
        """Its fields in the summary."""
        counts = self.counts
        return {
            "traces": counts.closed_quiet + counts.closed_max_wait,
            "no_candidate": self.no_candidate,
            "closed_by": {"quiet": counts.closed_quiet, "max_wait": counts.closed_max_wait},
            "closed_early": counts.closed_early,
            "open_at_end": counts.open_at_end,
            "spans": {"kept": counts.spans_kept, "dropped": counts.spans_dropped,
                      "late": counts.late_spans},
            "records_after_to": self.read_on,
        }


def summarise(
    window: dict[str, Any],
    records: int,
    elapsed_s: float,
    outcomes: Counter[str],
    rules: Sequence[str],
    tally: Tally | None = None,
    dry: DryRun | None = None,
    spans: SpanWindow | None = None,
) -> dict[str, Any]:
    """The summary ``--summary-json`` writes (and the table shows).

    ``window`` describes the replay (topic, from, to, dry_run, complete) and leads the summary;
    ``rules`` are ``RULES``, in order; ``spans`` is given for a span topic (``skipped`` then
    counts traces with an empty answer).
    """
    tally = tally or Tally()
    latencies = [float(ms) for ms in tally.latencies_ms]
    counted = dry.left_out if dry is not None else outcomes
    left_out = {key: counted[key] for key in ("skipped", "filtered", "sampled_out")}
    summary: dict[str, Any] = {
        **window,
        "records": records,
        "pass": tally.verdicts["pass"],
        "fail": tally.verdicts["fail"],
        "error": tally.verdicts["error"],
        **left_out,
        "not_applicable": counted["not_applicable"],
        "dead_lettered": dry.dead_lettered if dry else outcomes["dead_lettered"],
        "rules": {name: _rule_counts(name, tally, dry) for name in rules},
        "scores": {key: tally.scores[key] for key in SCORE_KEYS},
        "latency_ms_p50": percentile(latencies, 50),
        "latency_ms_p95": percentile(latencies, 95),
        "cache_hits": dry.cache_hits if dry else tally.cache_hits,
        "tokens": tally.tokens,
        "cost_usd": tally.cost.cost_usd,
        "elapsed_s": round(elapsed_s, 3),
    }
    if dry is not None:
        summary |= {
            "would_judge": dry.would_judge,
            "estimated_tokens": dry.estimated_tokens,
            # A range: the prompts alone, up to every answer at its whole allowance.
            "estimated_cost_usd_min": dry.prompt_cost_usd,
            "estimated_cost_usd": dry.estimate.cost_usd or 0.0,
            "prices": dry.prices.summary(),
        }
    if spans is not None:
        summary |= spans.summary()
    return summary


def _rule_counts(name: str, tally: Tally, dry: DryRun | None) -> dict[str, int]:
    """A rule's verdicts; in a dry run, how many traces the judge would be asked about."""
    if dry is not None and name == RULE:
        return {"would_judge": dry.would_judge}
    counts = dry.by_rule if dry is not None else tally.by_rule
    return {kind: counts[name, kind] for kind in ("pass", "fail", "error")}


def summary_table(summary: dict[str, Any]) -> Table:
    """The summary for people."""
    end = summary["to"] or "the end offsets at start"
    title = f"replay of {summary['topic']}\nfrom {summary['from']} to {end}"
    if summary["dry_run"]:
        title += " (dry run)"
    if "batch" in summary:
        title += " (Batch API)"
    if not summary["complete"]:
        title += " [interrupted]"
    table = Table(title=title)
    table.add_column("")
    table.add_column("count", justify="right")
    table.add_row("records read", str(summary["records"]))
    if summary["dry_run"]:
        table.add_row("would be judged", str(summary["would_judge"]))
    else:
        for kind in ("pass", "fail", "error"):
            table.add_row(kind, str(summary[kind]))
    rules: dict[str, dict[str, int]] = summary["rules"]
    if RULE not in rules:  # groundedness applies to every answer: never any then
        table.add_row("no rule applies", str(summary["not_applicable"]))
    table.add_row("skipped (empty or no answer)", str(summary["skipped"]))
    # Left out by a cost control: shown when one was, as a setting nobody uses is no news.
    if summary["filtered"]:
        table.add_row("verdicts filtered out (per rule)", str(summary["filtered"]))
    if summary["sampled_out"]:
        table.add_row("verdicts sampled out (per rule)", str(summary["sampled_out"]))
    table.add_row("dead-lettered", str(summary["dead_lettered"]))
    if list(rules) != [RULE]:  # groundedness alone: the totals are its own
        _rule_rows(table, rules)
    if "traces" in summary:
        _span_rows(table, summary)
    table.add_section()
    if summary["dry_run"]:
        if summary["cache_hits"]:
            table.add_row("of those, answered by the cache", str(summary["cache_hits"]))
        table.add_row("estimated tokens", f"{summary['estimated_tokens']:,}")
        low, high = summary["estimated_cost_usd_min"], summary["estimated_cost_usd"]
        table.add_row("estimated cost (prompts alone, with whole answers)",
                      f"{format_usd(low)} to {format_usd(high)}" if high else format_usd(high))
        table.add_row("prices (USD per M tokens)", _priced_at(summary["prices"]))
    else:
        for key, count in summary["scores"].items():
            table.add_row(f"score {key}", str(count))
        table.add_section()
        p50, p95 = summary["latency_ms_p50"], summary["latency_ms_p95"]
        latency = "-" if p50 is None else f"{p50:,.0f} / {p95:,.0f} ms"
        table.add_row("judge latency p50 / p95", latency)
        tokens = summary["tokens"]
        table.add_row("tokens (prompt + completion)",
                      f"{tokens['total']:,} ({tokens['prompt']:,} + {tokens['completion']:,})")
        if RULE in rules:
            table.add_row("answers from the cache (no tokens)", str(summary["cache_hits"]))
            priced = ("JUDGE_PRICE_*" if "batch" not in summary else
                      f"JUDGE_PRICE_*, batch answers at {summary['batch']['price_factor']:.0%}")
            table.add_row(f"judge cost ({priced})", format_usd(summary["cost_usd"]))
    if "batch" in summary:
        _batch_rows(table, summary)
    elapsed = summary["elapsed_s"]
    rate = summary["records"] / elapsed if elapsed > 0 else 0.0
    table.add_row("wall time", f"{elapsed:.1f} s ({rate:,.1f} records/s)")
    return table


def _batch_rows(table: Table, summary: dict[str, Any]) -> None:
    """A batch replay's batches and requests, and what earlier runs published."""
    batch = summary["batch"]
    table.add_section()
    expired = f" ({batch['batches_expired']} expired)" if batch["batches_expired"] else ""
    table.add_row("batches", f"{batch['batches']}{expired}")
    table.add_row("requests (identical ones once)", f"{batch['requests']:,}")
    table.add_row("answered by the batch", f"{batch['answered_by_batch']:,}")
    if batch["resubmitted"]:
        table.add_row("sent again after an expiry", f"{batch['resubmitted']:,}")
    table.add_row("sent synchronously (the batch failed them)",
                  f"{batch['sent_synchronously']:,}")
    table.add_row("published by an earlier run (not sent again)",
                  f"{batch['already_published']:,}")
    if batch.get("repeated_in_window"):
        table.add_row("repeated records of the window (sent once)",
                      f"{batch['repeated_in_window']:,}")
    table.add_row("state file", batch["state_file"])
    published = summary["pass"] + summary["fail"] + summary["error"]
    if summary["complete"] and published == 0 and batch["already_published"]:
        table.caption = ("nothing published: every verdict of this window was published by an "
                         "earlier run")


def _priced_at(prices: dict[str, Any]) -> str:
    """The dry run's prices, and where they come from."""
    given, taken = prices["input_per_million"], prices["output_per_million"]
    if prices["from"] == FALLBACK_PRICE:
        return f"{given:g} ({FALLBACK_PRICE})"
    return f"{given:g} in / {taken:g} out ({CONFIGURED_PRICES})"


def _rule_rows(table: Table, rules: dict[str, dict[str, int]]) -> None:
    """Each rule's verdicts (a dry run's groundedness: the traces it would judge)."""
    table.add_section()
    for name, counts in rules.items():
        if "would_judge" in counts:
            table.add_row(f"{name}: would be judged", str(counts["would_judge"]))
        else:
            table.add_row(f"{name}: pass / fail / error",
                          f"{counts['pass']} / {counts['fail']} / {counts['error']}")


def _span_rows(table: Table, summary: dict[str, Any]) -> None:
    """A span topic's traces and spans."""
    table.add_section()
    closed_by, spans = summary["closed_by"], summary["spans"]
    table.add_row("traces assembled", str(summary["traces"]))
    table.add_row("closed by quiet / max wait", f"{closed_by['quiet']} / {closed_by['max_wait']}")
    if summary["closed_early"]:
        table.add_row("closed early (MAX_OPEN_TRACES, window full)",
                      str(summary["closed_early"]))
    if summary["open_at_end"]:
        table.add_row("still open at the topic's end (not judged)", str(summary["open_at_end"]))
    table.add_row("no candidate (nothing to judge)", str(summary["no_candidate"]))
    table.add_row("spans kept / dropped", f"{spans['kept']:,} / {spans['dropped']:,}")
    table.add_row("records read past --to", str(summary["records_after_to"]))
