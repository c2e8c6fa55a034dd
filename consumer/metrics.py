"""Prometheus metrics of the worker (served on ``HEALTH_PORT`` at ``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

VERDICTS = Counter(
    "groundedness_verdicts", "Verdicts published, by verdict.", ["verdict"], registry=REGISTRY
)
SKIPPED = Counter(
    "groundedness_skipped", "Traces not evaluated because the output is empty.", registry=REGISTRY
)
DEAD_LETTERS = Counter(
    "groundedness_dead_letters", "Records dead-lettered as undecodable.", registry=REGISTRY
)
JUDGE_LATENCY = Histogram(
    "groundedness_judge_latency_seconds",
    "Time to a judge result, retries included.",
    buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120),
    registry=REGISTRY,
)
JUDGE_TOKENS = Counter(
    "groundedness_judge_tokens", "Tokens spent on the judge, by kind.", ["kind"], registry=REGISTRY
)
JUDGE_RETRIES = Counter(
    "groundedness_judge_retries", "Judge attempts beyond the first.", registry=REGISTRY
)
IN_FLIGHT = Gauge(
    "groundedness_in_flight", "Records between fetch and commit.", registry=REGISTRY
)
CONSUMER_LAG = Gauge(
    "groundedness_consumer_lag",
    "Records behind the end of the partition.",
    ["topic", "partition"],
    registry=REGISTRY,
)
CIRCUIT_OPEN = Gauge(
    "groundedness_circuit_open", "1 while the judge is considered down.", registry=REGISTRY
)
