"""A replay's summary with several rules: totals and counts per rule, the judge's figures
(scores, latency, tokens) from groundedness verdicts alone, and a dry run that runs the
deterministic rules for real while only estimating the judge's calls."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from rich.console import Console

from consumer.commands.replay_dry_run import DryRun, TraceCounter
from consumer.commands.replay_summary import summarise, summary_table
from consumer.commands.replay_tally import Tally
from consumer.judge.prompt import Limits
from consumer.rules.answered_without_tool import AnsweredWithoutTool
from consumer.rules.missing_citation import MissingCitation
from consumer.rules.rule_set import RuleSet
from consumer.verdicts import TraceOrigin
from schemas.trace import TraceEvent
from schemas.verdict import Usage, VerdictEvent
from tests.support.pipeline_fakes import Rec
from tests.support.transactional_fakes import a_verdict

WINDOW = {"topic": "llm-traces", "from": "2024-05-01T00:00:00+00:00", "to": None,
          "dry_run": False, "complete": True}
DOCS = [{"id": "kb-1", "content": "Refunds are prorated."}]


def deterministic(rule: str, verdict: str) -> VerdictEvent:
    """A deterministic rule's verdict, as ``RuleSet`` writes one: no model, score 1 or 0."""
    return a_verdict(None).model_copy(update={
        "rule": rule, "prompt_version": f"{rule}@v1", "judge_model": None, "threshold": None,
        "raw_score": None, "verdict": verdict, "score": 1.0 if verdict == "pass" else 0.0,
        "latency_ms": 0})


def rendered(summary: dict[str, Any]) -> dict[str, str]:
    """The table's rows, label -> count, as a person reads them."""
    console = Console(record=True, width=120)
    console.print(summary_table(summary))
    cells = [line.split("│") for line in console.export_text().splitlines()]
    return {row[1].strip(): row[2].strip() for row in cells if len(row) == 4}


def test_the_judges_figures_come_from_groundedness_verdicts_alone() -> None:
    tally = Tally()
    usage = Usage(prompt_tokens=90, completion_tokens=10, total_tokens=100)
    tally.add(a_verdict(None).model_copy(update={"latency_ms": 800, "usage": usage}))
    tally.add(a_verdict(None).model_copy(update={"verdict": "fail", "score": 0.25,
                                                 "latency_ms": 1200}))
    for verdict in ("fail", "fail", "pass"):
        tally.add(deterministic("missing_citation", verdict))
    tally.add(deterministic("answered_without_tool", "pass"))

    summary = summarise(WINDOW, 2, 1.0, Counter(),
                        ("groundedness", "missing_citation", "answered_without_tool"), tally)

    assert (summary["pass"], summary["fail"], summary["error"]) == (3, 3, 0)
    assert summary["rules"] == {
        "groundedness": {"pass": 1, "fail": 1, "error": 0},
        "missing_citation": {"pass": 1, "fail": 2, "error": 0},
        "answered_without_tool": {"pass": 1, "fail": 0, "error": 0},
    }
    # The deterministic verdicts' 1.0 / 0.0 and their 0 ms are no judge scores or latencies.
    assert summary["scores"] == {"0.00": 0, "0.25": 1, "0.50": 0, "0.75": 0, "1.00": 1}
    assert (summary["latency_ms_p50"], summary["latency_ms_p95"]) == (800.0, 1200.0)
    assert summary["tokens"]["total"] == 100
    text = rendered(summary)
    assert text["missing_citation: pass / fail / error"] == "1 / 2 / 0"
    assert "no rule applies" not in text, "groundedness applies to every answer"
    json.dumps(summary)  # what --summary-json writes


def test_groundedness_alone_keeps_todays_table() -> None:
    tally = Tally()
    tally.add(a_verdict(None))
    summary = summarise(WINDOW, 1, 1.0, Counter(), ("groundedness",), tally)
    assert summary["rules"] == {"groundedness": {"pass": 1, "fail": 0, "error": 0}}
    text = rendered(summary)
    assert not any(label.startswith("groundedness:") for label in text)
    assert "no rule applies" not in text
    assert (text["records read"], text["pass"]) == ("1", "1")


def rule_set() -> RuleSet:
    return RuleSet([MissingCitation(), AnsweredWithoutTool()])


def record(offset: int, **fields: Any) -> Rec:
    value = json.dumps({"trace_id": f"t{offset}", **fields}).encode()
    return Rec("llm-traces", 0, offset, 0, None, value, [])


RECORDS = [
    record(0, output="Prorated [1].", retrieved_documents=DOCS),
    record(1, output="Prorated.", retrieved_documents=DOCS, tools_available=["search"]),
    record(2, output="Hello."),  # no rule but groundedness applies
    record(3, output="  ", retrieved_documents=DOCS),
    Rec("llm-traces", 0, 4, 0, None, b"not json", []),
]


async def test_a_dry_run_without_groundedness_runs_the_rules_and_estimates_nothing() -> None:
    dry = DryRun(Limits(), rule_set(), judging=False)
    for rec in RECORDS:
        await dry.add(rec)

    assert dry.by_rule == {("missing_citation", "pass"): 1, ("missing_citation", "fail"): 1,
                           ("answered_without_tool", "fail"): 1}
    assert (dry.would_judge, dry.estimated_tokens) == (0, 0)
    assert (dry.not_applicable, dry.skipped, dry.dead_lettered) == (1, 1, 1)
    summary = summarise({**WINDOW, "dry_run": True}, 5, 1.0, Counter(),
                        ("missing_citation", "answered_without_tool"), dry=dry,
                        price_per_million_tokens=0.15)
    assert summary["rules"] == {"missing_citation": {"pass": 1, "fail": 1, "error": 0},
                                "answered_without_tool": {"pass": 0, "fail": 1, "error": 0}}
    assert (summary["not_applicable"], summary["estimated_cost_usd"]) == (1, 0.0)
    text = rendered(summary)
    assert text["no rule applies"] == "1"
    assert text["answered_without_tool: pass / fail / error"] == "0 / 1 / 0"


async def test_a_dry_run_with_groundedness_estimates_every_answer_beside_the_rules() -> None:
    dry = DryRun(Limits(), rule_set(), judging=True)
    for rec in RECORDS:
        await dry.add(rec)

    assert dry.would_judge == 3
    assert dry.estimated_tokens > 3 * 400  # each request carries the answer allowance
    assert dry.not_applicable == 0
    assert sum(dry.by_rule.values()) == 3
    summary = summarise({**WINDOW, "dry_run": True}, 5, 1.0, Counter(),
                        ("groundedness", "missing_citation", "answered_without_tool"), dry=dry)
    assert summary["rules"]["groundedness"] == {"would_judge": 3}
    assert rendered(summary)["groundedness: would be judged"] == "3"


async def test_a_span_dry_run_reads_the_traces_origin_as_the_live_rules_do() -> None:
    """Documents taken from the model's prompt (no retriever) are no sources to cite."""
    counter = TraceCounter(Limits(), rule_set(), judging=False)
    trace = TraceEvent(trace_id="a" * 32, output="Prorated.", retrieved_documents=DOCS)
    prompt_only = TraceOrigin(span_id=None, project_id=None, session_id=None,
                              context_source="llm_input", spans=2, root_seen=True,
                              closed_by="quiet")
    await counter.dry.count_trace(trace, prompt_only)
    assert (counter.dry.by_rule, counter.dry.not_applicable) == (Counter(), 1)
