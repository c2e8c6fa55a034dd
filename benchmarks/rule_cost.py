"""CPU per trace of each deterministic rule, without Kafka: what a rule adds to a trace.

Each figure is the median over ``--passes`` of this process's CPU time (not wall time: the
machine may be busy) for ``applies`` and, where it applies, ``check``, per trace of a set:

- ``rules-sample``: the hand-labelled rules sample (``consumer/data/rules-sample.jsonl``): cited
  and uncited answers with tricky brackets and code, agent traces, one 28 KB answer;
- ``factcheck-gpt``: the bundled 514 real RAG traces: short claims without markers, their
  documents plain strings with no id, title or URL to look for;
- ``28 KB answer``: the sample's largest answer alone, its one marker at the very end;
- ``hostile ids``: 256 documents with ids ``a`` ... 256 ``a``, and an answer of 400 kB of ``a``.

    python -m benchmarks.rule_cost [--passes 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from statistics import median

from consumer.evaluation.labelled_rules import read_rules_sample
from consumer.jsonl import read_labelled
from consumer.rules.base import DeterministicRule
from consumer.rules.registry import REGISTRY, RuleOptions
from schemas.trace import TraceEvent

MIN_PASS_S = 0.2  # each pass repeats the set until it has run this long


def cpu_us_per_trace(rule: DeterministicRule, traces: Sequence[TraceEvent],
                     passes: int) -> float:
    """Median over ``passes`` of this process's CPU microseconds per trace of the rule."""
    def one_round() -> None:
        for trace in traces:
            if rule.applies(trace, None):
                rule.check(trace, None)

    costs = []
    for _ in range(passes):
        rounds, started = 0, time.process_time()
        while (spent := time.process_time() - started) < MIN_PASS_S:
            one_round()
            rounds += 1
        costs.append(spent / (rounds * len(traces)) * 1e6)
    return median(costs)


def trace_sets() -> dict[str, list[TraceEvent]]:
    """The sets the figures are taken on."""
    labelled = [row.trace for row in read_rules_sample()]
    factcheck = [
        TraceEvent.model_validate({"trace_id": row.id, "input": row.input, "output": row.output,
                                   "retrieved_documents": row.documents})
        for row in read_labelled()
    ]
    largest = max(labelled, key=lambda trace: len(trace.output or ""))
    # A hostile record: 256 document ids a, aa, ... and 400 kB of a: each id occurs ~400,000
    # times, never as a word of its own (the review found this took 69 s; now linear).
    hostile = TraceEvent.model_validate({
        "trace_id": "hostile", "output": "a" * 400_000,
        "retrieved_documents": [{"content": "x", "id": "a" * n} for n in range(1, 257)]})
    return {"rules-sample": labelled, "factcheck-gpt": factcheck, "28 KB answer": [largest],
            "hostile ids": [hostile]}


def main(argv: Sequence[str] | None = None) -> None:
    """Print one line per rule: microseconds per trace on each set."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rule_cost")
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args(argv)
    sets = trace_sets()
    print(f"{'µs per trace (CPU)':24}" + "".join(f"{name:>16}" for name in sets))
    for name, build in REGISTRY.items():
        rule = build(RuleOptions())
        figures = [cpu_us_per_trace(rule, traces, args.passes) for traces in sets.values()]
        print(f"{name:24}" + "".join(f"{figure:16.1f}" for figure in figures))


if __name__ == "__main__":
    main()
