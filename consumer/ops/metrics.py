"""Prometheus metrics of the worker (served on ``HEALTH_PORT`` at ``/metrics``).

Counters are exposed with the ``_total`` suffix (``groundedness_verdicts_total``). Label
values known in advance start at 0, so rates and ratios exist before the first event.

| metric | type | updated by |
|---|---|---|
| ``groundedness_verdicts_total{verdict}`` | counter | pipeline, once the broker has the verdict |
| ``groundedness_skipped_total`` | counter | pipeline (empty output: no verdict) |
| ``groundedness_dead_letters_total`` | counter | pipeline (undecodable record) |
| ``groundedness_judge_latency_seconds`` | histogram | pipeline, per evaluation, retries included |
| ``groundedness_judge_tokens_total{kind}`` | counter | pipeline (``prompt`` / ``completion``) |
| ``groundedness_judge_retries_total`` | counter | pipeline (attempts beyond the first) |
| ``groundedness_in_flight`` | gauge | pipeline (records between fetch and commit) |
| ``groundedness_consumer_lag{topic,partition}`` | gauge | health watch, every few seconds |
| ``groundedness_circuit_open`` | gauge | circuit breaker (1 while the judge is down) |
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)


def _counter(name: str, documentation: str, *labels: str) -> Counter:
    return Counter(name, documentation, labels, registry=REGISTRY)


def _gauge(name: str, documentation: str, *labels: str) -> Gauge:
    return Gauge(name, documentation, labels, registry=REGISTRY)


VERDICTS = _counter("groundedness_verdicts", "Verdicts published, by verdict.", "verdict")
SKIPPED = _counter("groundedness_skipped", "Traces not evaluated because the output is empty.")
DEAD_LETTERS = _counter("groundedness_dead_letters", "Records dead-lettered as undecodable.")
JUDGE_LATENCY = Histogram(
    "groundedness_judge_latency_seconds",
    "Time to a judge result, retries included.",
    buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120),
    registry=REGISTRY,
)
JUDGE_TOKENS = _counter("groundedness_judge_tokens", "Tokens spent on the judge, by kind.", "kind")
JUDGE_RETRIES = _counter("groundedness_judge_retries", "Judge attempts beyond the first.")
IN_FLIGHT = _gauge("groundedness_in_flight", "Records between fetch and commit.")
CONSUMER_LAG = _gauge(
    "groundedness_consumer_lag",
    "Records of an assigned partition not yet fetched: end offset (last stable offset, as "
    "the worker reads committed records only) minus the consumer's position.",
    "topic",
    "partition",
)
CIRCUIT_OPEN = _gauge("groundedness_circuit_open", "1 while the judge is considered down.")

for _verdict in ("pass", "fail", "error"):
    VERDICTS.labels(_verdict)
for _kind in ("prompt", "completion"):
    JUDGE_TOKENS.labels(_kind)
