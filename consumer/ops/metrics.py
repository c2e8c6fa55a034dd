"""Prometheus metrics of the worker (served on ``HEALTH_PORT`` at ``/metrics``).

Counters are exposed with the ``_total`` suffix (``groundedness_verdicts_total``). Label
values known in advance start at 0, so rates and ratios exist before the first event.

| metric | type | updated by |
|---|---|---|
| ``groundedness_verdicts_total{rule,verdict,project}`` | counter | pipeline, once acknowledged |
| ``groundedness_skipped_total{rule,reason}`` | counter | pipeline, by rule and reason (``Skip``) |
| ``groundedness_dead_letters_total`` | counter | pipeline (undecodable record) |
| ``groundedness_judge_latency_seconds`` | histogram | pipeline, per evaluation, retries included |
| ``groundedness_judge_tokens_total{kind}`` | counter | pipeline (``prompt`` / ``completion``) |
| ``groundedness_judge_retries_total`` | counter | pipeline (attempts beyond the first) |
| ``groundedness_judge_cache_hits_total`` | counter | pipeline (a verdict from a reused answer) |
| ``groundedness_judge_cost_usd_total{project}`` | counter | pipeline (with JUDGE_PRICE_* set) |
| ``groundedness_budget_remaining_usd`` | gauge | cost: the daily budget less today's spend |
| ``groundedness_in_flight`` | gauge | pipeline (records between fetch and commit) |
| ``groundedness_consumer_lag{topic,partition}`` | gauge | health watch, every few seconds |
| ``groundedness_circuit_open`` | gauge | circuit breaker (1 while the judge is down) |
| ``groundedness_spans_total{outcome}`` | counter | span input: ``kept`` (GenAI) or ``dropped`` |
| ``groundedness_open_traces`` | gauge | span input: traces being assembled |
| ``groundedness_traces_closed_total{closed_by}`` | counter | span input: quiet/max_wait/capacity |
| ``groundedness_late_spans_total`` | counter | span input: spans of a trace already closed |
| ``groundedness_split_traces_total`` | counter | span input: a trace seen on two partitions |
| ``groundedness_unkeyed_span_records_total`` | counter | span input: a record not keyed by trace |
| ``groundedness_verdict_events_dropped_total`` | counter | VERDICT_EVENTS: events never sent |
| ``groundedness_judge_calls_total`` | counter | judge: every call sent, probes included |
| ``groundedness_judge_rate_limited_total{code}`` | counter | judge: 429s by the error's code |
| ``groundedness_judge_account_remaining{budget}`` | gauge | judge: the account's left, last seen |
| ``groundedness_judge_pace_requests_per_minute`` | gauge | judge: this replica's pace |
| ``groundedness_records_redone_total{reason}`` | counter | hand-over: skipped_done / reread |
| ``groundedness_commit_metadata_bytes`` | histogram | each commit: its progress's size |
| ``groundedness_commit_metadata_overflow_total`` | counter | a progress that did not fit |
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)


def _counter(name: str, documentation: str, *labels: str) -> Counter:
    return Counter(name, documentation, labels, registry=REGISTRY)


def _gauge(name: str, documentation: str, *labels: str) -> Gauge:
    return Gauge(name, documentation, labels, registry=REGISTRY)


VERDICTS = _counter(
    "groundedness_verdicts",
    "Verdicts published, by rule, verdict and project (the trace's; METRICS_MAX_PROJECTS of "
    "them, the rest as other; empty when the trace names none).", "rule", "verdict", "project")
SKIPPED = _counter(
    "groundedness_skipped",
    "Traces a rule gave no verdict, by rule and reason: empty_output, no_answer_found (spans "
    "whose LLM calls recorded no answer anywhere), filtered (<RULE>_FILTER, else "
    "TRACE_FILTER), sampled_out (<RULE>_SAMPLE_RATE, else SAMPLE_RATE for the judge), budget "
    "(JUDGE_BUDGET_USD_PER_DAY spent: no judge call).",
    "rule", "reason",
)
DEAD_LETTERS = _counter("groundedness_dead_letters", "Records dead-lettered as undecodable.")
JUDGE_LATENCY = Histogram(
    "groundedness_judge_latency_seconds",
    "Time to a judge result, retries included.",
    buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120),
    registry=REGISTRY,
)
JUDGE_TOKENS = _counter("groundedness_judge_tokens", "Tokens spent on the judge, by kind.", "kind")
JUDGE_RETRIES = _counter("groundedness_judge_retries", "Judge attempts beyond the first.")
JUDGE_CACHE_HITS = _counter(
    "groundedness_judge_cache_hits",
    "Verdicts whose judge answer was reused from an identical request (no tokens spent).",
)
JUDGE_COST = _counter(
    "groundedness_judge_cost_usd",
    "USD spent on the judge, from its reported tokens and JUDGE_PRICE_*_PER_MILLION, by "
    "project (as on groundedness_verdicts_total).",
    "project",
)
IN_FLIGHT = _gauge("groundedness_in_flight", "Records between fetch and commit.")
NO_PROJECT = ""  # a trace that names no project: the label empty, as Prometheus reads absent
OTHER_PROJECTS = "other"
MAX_PROJECT_CHARS = 100  # a label value, not a document


class ProjectLabels:
    """The ``project`` label of a trace's series: its project, for the first ``limit`` seen by
    this process, and ``other`` for the rest, so a producer's ids cannot grow the series
    without bound (``METRICS_MAX_PROJECTS``)."""

    def __init__(self, limit: int = 20) -> None:
        self.limit = limit
        self._kept: set[str] = set()

    def label(self, project: str | None) -> str:
        """The label value for ``project``."""
        if not project:
            return NO_PROJECT
        project = project[:MAX_PROJECT_CHARS]
        if project in self._kept:
            return project
        if len(self._kept) < self.limit:
            self._kept.add(project)
            return project
        return OTHER_PROJECTS


PROJECTS = ProjectLabels()  # wiring sets its limit from METRICS_MAX_PROJECTS


_budget_remaining: list[Gauge] = []


def budget_remaining() -> Gauge:
    """The daily budget's gauge, registered by the first budget: a worker without
    JUDGE_BUDGET_USD_PER_DAY exports no such series (its 0 would say the budget is spent)."""
    if not _budget_remaining:
        _budget_remaining.append(_gauge(
            "groundedness_budget_remaining_usd",
            "JUDGE_BUDGET_USD_PER_DAY less the fleet's judge spend today (UTC) as this replica "
            "knows it (the results topic, and its own calls not yet read back); at or below 0, "
            "no judge calls."))
    return _budget_remaining[0]
CONSUMER_LAG = _gauge(
    "groundedness_consumer_lag",
    "Records of an assigned partition not yet fetched: end offset (last stable offset, as "
    "the worker reads committed records only) minus the consumer's position.",
    "topic",
    "partition",
)
CIRCUIT_OPEN = _gauge("groundedness_circuit_open", "1 while the judge is considered down.")

# Span input (TRACES_FORMAT=otlp_proto|otlp_json); zero with trace_json.
SPANS = _counter(
    "groundedness_spans",
    "Spans read, by outcome: kept (GenAI content) or dropped (none, invalid ids, over the "
    "per-trace cap, or late).",
    "outcome",
)
OPEN_TRACES = _gauge("groundedness_open_traces", "Traces being assembled on this worker.")
TRACES_CLOSED = _counter(
    "groundedness_traces_closed",
    "Traces closed for judging, by why: quiet (root in, then no span for TRACE_QUIET_SECONDS), "
    "max_wait (TRACE_MAX_WAIT_SECONDS after the first span) or capacity (MAX_OPEN_TRACES "
    "reached: the oldest closed with what it had).",
    "closed_by",
)
LOG_RECORDS = _counter(
    "groundedness_log_records",
    "Log records read from OTLP_LOGS_TOPIC, by outcome: kept (a GenAI event of a trace) or "
    "dropped (another log, no trace id, or unreadable).",
    "outcome",
)
LATE_SPANS = _counter("groundedness_late_spans", "Spans of a trace already closed: ignored.")
SPLIT_TRACES = _counter(
    "groundedness_split_traces",
    "Traces whose spans this worker met on two partitions: each part is judged alone, at its "
    "max wait (set partition_traces_by_id in the collector's Kafka exporter).",
)
UNKEYED_SPAN_RECORDS = _counter(
    "groundedness_unkeyed_span_records",
    "Span records whose key is not the one trace id they carry (the exporter is not "
    "partitioning by trace id, so a trace's spans may land on several partitions).",
)

# The judge's account, shared by every replica (consumer/judge/pacing.py).
JUDGE_CALLS = _counter("groundedness_judge_calls", "Judge calls sent (probes included).")
JUDGE_RATE_LIMITED = _counter(
    "groundedness_judge_rate_limited",
    "Judge calls answered 429, by the error's code: rate_limit_exceeded (the account's rate: "
    "slows the worker), insufficient_quota (out of credit: holds), none (no code given).",
    "code",
)
JUDGE_ACCOUNT_REMAINING = _gauge(
    "groundedness_judge_account_remaining",
    "The judge account's requests or tokens left, as the latest response's x-ratelimit-remaining "
    "headers said (shared by every replica).",
    "budget",
)
JUDGE_PACE = _gauge(
    "groundedness_judge_pace_requests_per_minute",
    "The pace this replica sends judge calls at, set from the account's headers and 429s "
    "(0: not paced).",
)

# Progress in the commit metadata (consumer/pipeline/progress.py).
RECORDS_REDONE = _counter(
    "groundedness_records_redone",
    "Records below where a partition's previous owner had read, met again after a hand-over "
    "or restart: skipped_done (it had finished them: skipped) or reread (it had not).",
    "reason",
)
COMMIT_METADATA_BYTES = Histogram(
    "groundedness_commit_metadata_bytes",
    "Size of the progress written in each partition's commit metadata.",
    buckets=(16, 64, 256, 1024, 2048, 3072, 4000),
    registry=REGISTRY,
)
COMMIT_METADATA_OVERFLOW = _counter(
    "groundedness_commit_metadata_overflow",
    "Commits left out because the partition's progress did not fit the commit metadata: its "
    "last commit stands, and more is redone after a hand-over.",
)


def taken(how: Literal["new", "reread", "skipped_done"]) -> bool:
    """Count a fetched record met again after a hand-over; False when it is skipped."""
    if how == "new":
        return True
    RECORDS_REDONE.labels(how).inc()
    return how == "reread"


# VERDICT_EVENTS=otlp (consumer/pipeline/delivery/events): best effort beside the verdict topic.
VERDICT_EVENTS_DROPPED = _counter(
    "groundedness_verdict_events_dropped",
    "Verdict events (VERDICT_EVENTS=otlp) never sent: the queue was full, the OTLP export "
    "failed, or they were still queued at shutdown. Their verdicts were published.",
)


def expect_rules(rules: Iterable[str]) -> None:
    """Start every verdict series of ``rules`` at 0: the worker's ``RULES`` (``wiring``), and
    only those, so a worker without groundedness shows no groundedness series."""
    for rule in rules:
        for verdict in ("pass", "fail", "error"):
            VERDICTS.labels(rule, verdict, NO_PROJECT)
        for reason in ("empty_output", "no_answer_found", "filtered", "sampled_out", "budget"):
            SKIPPED.labels(rule, reason)

for _kind in ("prompt", "completion"):
    JUDGE_TOKENS.labels(_kind)
JUDGE_COST.labels(NO_PROJECT)
for _outcome in ("kept", "dropped"):
    SPANS.labels(_outcome)
for _code in ("rate_limit_exceeded", "insufficient_quota", "none"):
    JUDGE_RATE_LIMITED.labels(_code)
for _budget in ("requests", "tokens"):
    JUDGE_ACCOUNT_REMAINING.labels(_budget)
for _redone in ("skipped_done", "reread"):
    RECORDS_REDONE.labels(_redone)
for _closed_by in ("quiet", "max_wait", "capacity"):
    TRACES_CLOSED.labels(_closed_by)
