"""A replay's summary with several rules: totals and counts per rule, the judge's figures
(scores, latency, tokens, cache hits, cost) from groundedness verdicts alone, what the cost
controls left out, and a dry run that runs the very rules of the worker (filter, sampling,
cache) with a judge that only estimates, priced at the configured prices or the fallback."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import structlog
from rich.console import Console

from consumer.cost.pricing import FALLBACK_PRICE, Prices, format_usd
from consumer.cost.sampling import sampled
from consumer.cost.verdict_tally import Tally
from consumer.judge.prompt import MAX_ANSWER_TOKENS, Limits, build_request
from consumer.replay.dry_run import DryRun, DryRunPrices, TraceCounter, dry_run_rules
from consumer.replay.summary import summarise, summary_table
from consumer.rules.answered_without_tool import AnsweredWithoutTool
from consumer.rules.missing_citation import MissingCitation
from consumer.rules.rule_set import RuleSet
from consumer.settings import Settings, load_settings
from consumer.telemetry.assembly import ClosedTrace
from consumer.telemetry.origin import TraceOrigin
from consumer.telemetry.spans import Span
from schemas.trace import TraceEvent
from schemas.verdict import Usage, VerdictEvent
from tests.support.pipeline_fakes import Rec
from tests.support.transactional_fakes import a_verdict

WINDOW = {"topic": "llm-traces", "from": "2024-05-01T00:00:00+00:00", "to": None,
          "dry_run": False, "complete": True}
DOCS = [{"id": "kb-1", "content": "Refunds are prorated."}]
FALLBACK = DryRunPrices(Prices(0.15, 0.15), FALLBACK_PRICE)


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


def settings(**overrides: Any) -> Settings:
    """The worker's settings for a dry run: no key (the estimating judge needs none), the
    cache off unless a test turns it on."""
    values: dict[str, Any] = {"min_acceptable_score": 0.5, "openai_api_key": None,
                              "judge_cache_size": 0, **overrides}
    return load_settings(**values)


async def test_a_dry_run_without_groundedness_runs_the_rules_and_estimates_nothing() -> None:
    dry = DryRun(rule_set(), FALLBACK)
    for rec in RECORDS:
        await dry.add(rec)

    assert dry.by_rule == {("missing_citation", "pass"): 1, ("missing_citation", "fail"): 1,
                           ("answered_without_tool", "fail"): 1}
    assert (dry.would_judge, dry.estimated_tokens) == (0, 0)
    assert (dry.left_out["not_applicable"], dry.left_out["skipped"], dry.dead_lettered) == (
        1, 1, 1)
    summary = summarise({**WINDOW, "dry_run": True}, 5, 1.0, Counter(),
                        ("missing_citation", "answered_without_tool"), dry=dry)
    assert summary["rules"] == {"missing_citation": {"pass": 1, "fail": 1, "error": 0},
                                "answered_without_tool": {"pass": 0, "fail": 1, "error": 0}}
    assert (summary["not_applicable"], summary["estimated_cost_usd"]) == (1, 0.0)
    text = rendered(summary)
    assert text["no rule applies"] == "1"
    assert text["answered_without_tool: pass / fail / error"] == "0 / 1 / 0"


async def test_a_dry_run_with_groundedness_estimates_every_answer_beside_the_rules() -> None:
    dry = DryRun(dry_run_rules(settings(rules="groundedness,missing_citation,"
                                              "answered_without_tool")), FALLBACK)
    for rec in RECORDS:
        await dry.add(rec)

    assert dry.would_judge == 3
    assert dry.estimated_tokens > 3 * MAX_ANSWER_TOKENS  # each carries the answer allowance
    assert dry.left_out["not_applicable"] == 0
    assert sum(dry.by_rule.values()) == 3
    summary = summarise({**WINDOW, "dry_run": True}, 5, 1.0, Counter(),
                        ("groundedness", "missing_citation", "answered_without_tool"), dry=dry)
    assert summary["rules"]["groundedness"] == {"would_judge": 3}
    assert (summary["pass"], summary["fail"]) == (0, 0), "an estimate is no verdict"
    assert rendered(summary)["groundedness: would be judged"] == "3"


def production(offset: int, environment: str) -> Rec:
    return record(offset, output=f"Prorated, answer {offset}.", retrieved_documents=DOCS,
                  metadata={"environment": environment})


async def test_a_dry_run_filters_and_samples_the_traces_the_worker_would() -> None:
    """The worker's own rule set decides: TRACE_FILTER leaves traces out of every rule (each
    counted), SAMPLE_RATE only out of the judge's, on the very ids ``sampled`` keeps."""
    records = [production(n, "production" if n % 3 else "staging") for n in range(60)]
    dry = DryRun(dry_run_rules(settings(
        rules="groundedness,missing_citation", sample_rate=0.5,
        trace_filter="metadata.environment == 'production'")), FALLBACK)
    for rec in records:
        await dry.add(rec)

    kept = [f"t{n}" for n in range(60) if n % 3]
    judged = [trace_id for trace_id in kept if sampled(trace_id, 0.5)]
    assert 0 < len(judged) < len(kept)
    assert (dry.left_out["filtered"], dry.left_out["sampled_out"]) == (
        2 * 20, len(kept) - len(judged))
    assert dry.would_judge == len(judged)
    assert sum(dry.by_rule.values()) == len(kept), "missing_citation on every kept trace"
    summary = summarise({**WINDOW, "dry_run": True}, 60, 1.0, Counter(),
                        ("groundedness", "missing_citation"), dry=dry)
    assert (summary["filtered"], summary["sampled_out"], summary["skipped"]) == (
        2 * 20, len(kept) - len(judged), 0)
    text = rendered(summary)
    assert text["verdicts filtered out (per rule)"] == "40"
    assert text["verdicts sampled out (per rule)"] == str(len(kept) - len(judged))


@pytest.mark.parametrize("cache_size", [0, 100])
async def test_a_dry_run_counts_what_the_answer_cache_would_save(cache_size: int) -> None:
    """Ten traces, three texts: with the cache, seven are answered by it, at no cost."""
    texts = ["Prorated [1].", "Refunds take a week.", "Ask support."]
    records = [record(n, output=texts[n % 3], retrieved_documents=DOCS) for n in range(10)]
    dry = DryRun(dry_run_rules(settings(judge_cache_size=cache_size)), FALLBACK)
    for rec in records:
        await dry.add(rec)

    estimates = [build_request(TraceEvent(trace_id="any", output=text,
                                          retrieved_documents=DOCS), Limits()).estimated_tokens
                 for text in texts]
    calls = [4, 3, 3] if cache_size == 0 else [1, 1, 1]
    assert dry.would_judge == 10
    assert dry.cache_hits == 10 - sum(calls)
    assert dry.estimated_tokens == sum(n * tokens for n, tokens in zip(calls, estimates,
                                                                        strict=True))
    summary = summarise({**WINDOW, "dry_run": True}, 10, 1.0, Counter(), ("groundedness",),
                        dry=dry)
    assert summary["cache_hits"] == dry.cache_hits
    assert ("of those, answered by the cache" in rendered(summary)) is bool(cache_size)


@pytest.mark.parametrize("configured", [True, False], ids=["JUDGE_PRICE_*", "fallback"])
async def test_a_dry_run_prices_its_estimate_at_the_configured_prices_or_the_fallback(
    configured: bool,
) -> None:
    prices = ({"judge_price_input_per_million": 0.15, "judge_price_output_per_million": 0.60}
              if configured else {})
    settings_ = settings(**prices)
    dry = DryRun(dry_run_rules(settings_), DryRunPrices.of(settings_, 2.0))
    records = [record(n, output=f"Prorated, answer {n}.", retrieved_documents=DOCS)
               for n in range(5)]
    for rec in records:
        await dry.add(rec)

    allowance = 5 * MAX_ANSWER_TOKENS
    prompt = dry.estimated_tokens - allowance
    summary = summarise({**WINDOW, "dry_run": True}, 5, 1.0, Counter(), ("groundedness",),
                        dry=dry)
    if configured:  # the prompt at the input price, the answer allowance at the output price
        low, high = prompt * 0.15 / 1e6, (prompt * 0.15 + allowance * 0.60) / 1e6
        assert summary["prices"] == {"input_per_million": 0.15, "output_per_million": 0.60,
                                     "from": "JUDGE_PRICE_*"}
        prices_row = "0.15 in / 0.6 out (JUDGE_PRICE_*)"
    else:  # every estimated token at the fallback
        low, high = prompt * 2.0 / 1e6, dry.estimated_tokens * 2.0 / 1e6
        assert summary["prices"]["from"] == FALLBACK_PRICE
        prices_row = "2 (--price-per-million-tokens)"
    assert summary["estimated_cost_usd_min"] == pytest.approx(low, rel=1e-12)
    assert summary["estimated_cost_usd"] == pytest.approx(high, rel=1e-12)
    text = rendered(summary)
    assert text["prices (USD per M tokens)"] == prices_row
    assert text["estimated cost (prompts alone, with whole answers)"] == (
        f"{format_usd(low)} to {format_usd(high)}")
    json.dumps(summary)


async def test_a_span_dry_run_reads_the_traces_origin_as_the_live_rules_do() -> None:
    """Documents taken from the model's prompt (no retriever) are no sources to cite."""
    counter = TraceCounter(DryRun(rule_set(), FALLBACK))
    trace = TraceEvent(trace_id="a" * 32, output="Prorated.", retrieved_documents=DOCS)
    prompt_only = TraceOrigin(span_id=None, project_id=None, session_id=None,
                              context_source="llm_input", spans=2, root_seen=True,
                              closed_by="quiet")
    await counter.dry.count_trace(trace, prompt_only)
    assert (counter.dry.by_rule, counter.dry.left_out["not_applicable"]) == (Counter(), 1)


async def test_a_span_dry_run_filters_on_the_resources_environment_and_service() -> None:
    """From spans, ``metadata.environment`` and ``service`` come from the resource."""
    rules = dry_run_rules(settings(
        rules="groundedness,missing_citation",
        trace_filter="metadata.environment == 'production' && service == 'support-bot'"))
    counter = TraceCounter(DryRun(rules, FALLBACK))
    for n, (environment, service) in enumerate([("production", "support-bot"),
                                                ("staging", "support-bot"),
                                                ("production", "checkout")]):
        origin = TraceOrigin(span_id=None, project_id=service, session_id=None,
                             context_source="retrieval", spans=3, root_seen=True,
                             closed_by="quiet", service=service, environment=environment)
        trace = TraceEvent(trace_id=f"{n:032x}", output="Prorated [1].",
                           retrieved_documents=DOCS)
        await counter.dry.count_trace(trace, origin)
    assert (counter.dry.would_judge, counter.dry.left_out["filtered"]) == (1, 2 * 2)
    assert counter.dry.by_rule == {("missing_citation", "pass"): 1}


# -- the published verdicts' cost ------------------------------------------------------------


def judged(verdict: str = "pass", *, cached: bool = False, cost: float | None = None,
           prompt: int = 0, completion: int = 0, latency_ms: int = 700) -> VerdictEvent:
    usage = Usage(prompt_tokens=prompt, completion_tokens=completion,
                  total_tokens=prompt + completion)
    return a_verdict(None).model_copy(update={
        "verdict": verdict, "cached": cached, "cost_usd": cost, "usage": usage,
        "latency_ms": latency_ms})


def test_the_judges_cost_and_cache_hits_are_summed_from_the_verdicts() -> None:
    tally = Tally()
    tally.add(judged(cost=0.00021, prompt=1000, completion=100))
    tally.add(judged(cached=True, cost=0.0, latency_ms=0))  # a reused answer: no tokens
    tally.add(judged("error", cost=0.00003, prompt=200))  # an error's tokens were paid for
    tally.add(deterministic("missing_citation", "fail"))
    outcomes = Counter({"skipped": 1, "filtered": 4, "sampled_out": 2})

    summary = summarise(WINDOW, 10, 1.0, outcomes, ("groundedness", "missing_citation"), tally)

    assert summary["cost_usd"] == pytest.approx(0.00024, rel=1e-12)
    assert summary["cache_hits"] == 1
    assert summary["tokens"] == {"prompt": 1200, "completion": 100, "total": 1300}
    assert (summary["skipped"], summary["filtered"], summary["sampled_out"]) == (1, 4, 2)
    assert summary["latency_ms_p50"] == 700.0, "a reused answer took no judge time"
    text = rendered(summary)
    assert text["judge cost (JUDGE_PRICE_*)"] == "$0.000240"
    assert text["answers from the cache (no tokens)"] == "1"
    assert text["verdicts filtered out (per rule)"] == "4"
    assert text["verdicts sampled out (per rule)"] == "2"
    json.dumps(summary)


def test_without_prices_the_cost_is_unknown_not_zero() -> None:
    tally = Tally()
    tally.add(judged(prompt=1000, completion=100))
    summary = summarise(WINDOW, 1, 1.0, Counter(), ("groundedness",), tally)
    assert summary["cost_usd"] is None
    text = rendered(summary)
    assert text["judge cost (JUDGE_PRICE_*)"] == "—"
    assert "verdicts filtered out (per rule)" not in text, "no row for a control left unused"


async def test_a_span_dry_run_counts_an_answer_found_nowhere_as_skipped() -> None:
    """As the live worker does: skipped (``no_answer_found``), not judged, in ``skipped``."""
    counter = TraceCounter(DryRun(rule_set(), FALLBACK))
    chat = Span("a" * 32, "b" * 16, None, "chat gpt-4o-mini", 0, 10,
                {"gen_ai.operation.name": "chat"})
    closed = ClosedTrace(trace_id="a" * 32, spans=(chat,), root_seen=True, closed_by="quiet",
                         span_count=1, capped=0, first_offset=0)
    await counter.handle(None, closed, structlog.get_logger())
    assert counter.dry.left_out == {"skipped": 1}
    summary = summarise({**WINDOW, "dry_run": True}, 1, 1.0, Counter(), ("missing_citation",),
                        dry=counter.dry)
    assert summary["skipped"] == 1
