"""``RuleSet``: the rules of ``RULES`` on one trace, one verdict per rule that applies."""

from __future__ import annotations

import asyncio

import pytest

from consumer.cost.rule_selection import Selection
from consumer.cost.sampling import sampled
from consumer.cost.trace_filter import compile_filter
from consumer.judge.prompt import Limits
from consumer.rules.answered_without_tool import AnsweredWithoutTool
from consumer.rules.base import Outcome
from consumer.rules.groundedness.evaluator import Evaluator
from consumer.rules.groundedness.rule import Groundedness
from consumer.rules.missing_citation import MissingCitation
from consumer.rules.rule_set import INTERNAL_ERROR, RuleResults, RuleSet
from consumer.rules.verdicts import verdict_id
from consumer.telemetry.origin import TraceOrigin
from schemas.trace import TraceEvent
from schemas.verdict import Source
from tests.support.pipeline_fakes import GatedJudge

SECRET = "sk-live-0123456789abcdef"
SOURCE = Source(topic="traces", partition=0, offset=7)
CITED = "Annual plans are refunded pro rata [1]."
DOCS = [{"id": "kb-1", "content": "Annual plans are refunded pro rata."}]


def _trace(output: str | None = CITED, **fields: object) -> TraceEvent:
    return TraceEvent.model_validate({"trace_id": "t-1", "output": output, **fields})


def _all_three(judge: GatedJudge | None = None) -> tuple[RuleSet, GatedJudge]:
    judge = judge or GatedJudge()
    judge.open(CITED)
    evaluator = Evaluator(judge, 0.5, Limits(), secrets=[SECRET])
    return RuleSet([Groundedness(evaluator), MissingCitation(), AnsweredWithoutTool()],
                   [SECRET]), judge


class Exploding:
    """A deterministic rule with a bug: it raises on every trace."""

    name = "missing_citation"
    version = "v1"

    def applies(self, trace: TraceEvent, origin: TraceOrigin | None) -> bool:
        return True

    def check(self, trace: TraceEvent, origin: TraceOrigin | None) -> Outcome:
        raise KeyError(f"no such field (key {SECRET})")


async def test_every_applicable_rule_gives_one_verdict_in_rules_order() -> None:
    rules, _ = _all_three()
    trace = _trace(retrieved_documents=DOCS, tools_available=["search_kb"],
                   tool_calls=[{"name": "search_kb"}])
    found = (await rules.evaluate(trace, SOURCE)).evaluations
    verdicts = [evaluation.verdict for evaluation in found]
    assert [v.rule for v in verdicts] == ["groundedness", "missing_citation",
                                          "answered_without_tool"]
    assert [v.prompt_version for v in verdicts] == ["groundedness@v1", "missing_citation@v2",
                                                    "answered_without_tool@v1"]
    assert len({v.verdict_id for v in verdicts}) == 3
    assert verdicts[0].verdict_id == verdict_id("t-1"), "groundedness keeps its ids"
    for checked in verdicts[1:]:
        assert (checked.verdict, checked.score, checked.judge_model, checked.threshold,
                checked.raw_score, checked.usage) == ("pass", 1.0, None, None, None, None)
        assert checked.source == SOURCE
        assert checked.truncation.documents_received == 1
        assert not checked.truncation.any
    assert verdicts[1].reason == 'citation marker "[1]" found'


async def test_the_order_is_the_one_rules_lists() -> None:
    judge = GatedJudge()
    judge.open(CITED)
    rules = RuleSet([MissingCitation(), Groundedness(Evaluator(judge, 0.5, Limits()))])
    found = (await rules.evaluate(_trace(retrieved_documents=DOCS))).evaluations
    assert [e.verdict.rule for e in found] == ["missing_citation", "groundedness"]
    assert rules.names == ("missing_citation", "groundedness")


async def test_a_trace_without_an_answer_gets_no_verdict_and_no_judge_call() -> None:
    rules, judge = _all_three()
    for output in (None, "", "   "):
        found = await rules.evaluate(_trace(output, retrieved_documents=DOCS))
        assert found == RuleResults([], dict.fromkeys(rules.names, "empty_output"))
        assert found.left_out() == {"skipped": 1}, "one trace, whatever the rules"
    assert judge.started == []


async def test_only_the_rules_that_apply_give_verdicts() -> None:
    rules = RuleSet([MissingCitation(), AnsweredWithoutTool()])
    assert await rules.evaluate(_trace()) == RuleResults([]), "no documents, no tools"
    found = (await rules.evaluate(_trace("From memory.", agent=True))).evaluations
    assert [(e.verdict.rule, e.verdict.verdict) for e in found] == [
        ("answered_without_tool", "fail")]


async def test_documents_that_are_the_prompt_are_not_read_as_sources() -> None:
    origin = TraceOrigin(span_id="ab" * 8, project_id=None, session_id=None,
                         context_source="llm_input", spans=1, root_seen=True,
                         closed_by="quiet")
    rules = RuleSet([MissingCitation()])
    assert await rules.evaluate(_trace(retrieved_documents=DOCS), origin=origin) == RuleResults([])


async def test_deterministic_verdicts_need_no_judge_and_never_hold() -> None:
    rules = RuleSet([MissingCitation()])
    assert not rules.holding
    found = (await rules.evaluate(_trace("No marker here.",
                                         retrieved_documents=DOCS))).evaluations
    verdict = found[0].verdict
    assert (verdict.verdict, verdict.score) == ("fail", 0.0)
    assert verdict.reason == "no citation marker in the answer; it had 1 retrieved document"
    assert found[0].result is None
    await rules.close()  # no judge to close: must not raise


async def test_the_judge_holding_holds_the_set() -> None:
    rules, judge = _all_three()
    judge.holding = True
    assert rules.holding


async def test_a_rule_that_raises_costs_the_trace_only_that_rules_verdict() -> None:
    judge = GatedJudge()
    judge.open(CITED)
    rules = RuleSet([Groundedness(Evaluator(judge, 0.5, Limits(), secrets=[SECRET])),
                     Exploding(), AnsweredWithoutTool()], [SECRET])
    trace = _trace(retrieved_documents=DOCS, agent=True)
    found = (await rules.evaluate(trace, SOURCE)).evaluations
    by_rule = {e.verdict.rule: e.verdict for e in found}
    assert by_rule["groundedness"].verdict == "pass"
    assert by_rule["answered_without_tool"].verdict == "fail"
    broken = by_rule["missing_citation"]
    assert broken.verdict == "error"
    assert broken.score is None
    assert broken.error is not None
    assert broken.error.type == INTERNAL_ERROR
    assert SECRET not in broken.model_dump_json()
    assert broken.verdict_id == verdict_id("t-1", "missing_citation@v1", "missing_citation")


async def test_a_trace_a_bug_stopped_gets_an_error_verdict_for_every_rule() -> None:
    rules, _ = _all_three()
    found = rules.failed("t-9", SOURCE, ValueError(f"mapping broke near {SECRET}"))
    assert [e.verdict.rule for e in found] == ["groundedness", "missing_citation",
                                               "answered_without_tool"]
    assert {e.verdict.verdict for e in found} == {"error"}
    assert found[0].verdict.judge_model == "gated-judge"
    assert found[1].verdict.judge_model is None
    assert all(SECRET not in e.verdict.model_dump_json() for e in found)
    assert len({e.verdict.verdict_id for e in found}) == 3


async def test_a_secret_in_what_a_rule_quotes_is_redacted() -> None:
    rules = RuleSet([AnsweredWithoutTool()], [SECRET])
    trace = _trace("Done.", tool_calls=[{"name": "fetch", "error": f"401 for key {SECRET}"}])
    verdict = (await rules.evaluate(trace)).evaluations[0].verdict
    assert verdict.verdict == "pass"
    assert verdict.reason is not None
    assert "failed" in verdict.reason
    assert SECRET not in verdict.reason


async def test_deterministic_verdicts_do_not_wait_for_each_other_only_for_the_judge() -> None:
    judge = GatedJudge()  # its gate stays shut until the test opens it
    rules = RuleSet([Groundedness(Evaluator(judge, 0.5, Limits())), MissingCitation()])
    pending = asyncio.ensure_future(rules.evaluate(_trace(retrieved_documents=DOCS)))
    await asyncio.sleep(0.01)
    assert not pending.done(), "a trace's verdicts come together, once the judge has answered"
    judge.open(CITED)
    assert [e.verdict.rule for e in (await pending).evaluations] == ["groundedness",
                                                                   "missing_citation"]


def test_a_rule_set_needs_a_rule() -> None:
    with pytest.raises(ValueError, match="at least one rule"):
        RuleSet([])


async def test_a_filtered_trace_gets_no_verdict_of_any_rule() -> None:
    judge = GatedJudge()
    judge.open(CITED)
    production_only = Selection(trace_filter=compile_filter(
        "metadata.environment == 'production'"))
    rules = RuleSet([Groundedness(Evaluator(judge, 0.5, Limits())), MissingCitation()],
                    selections=dict.fromkeys(("groundedness", "missing_citation"),
                                             production_only))
    staging = _trace(retrieved_documents=DOCS, metadata={"environment": "staging"})
    left_out = await rules.evaluate(staging)
    assert left_out == RuleResults([], {"groundedness": "filtered",
                                        "missing_citation": "filtered"})
    assert left_out.left_out() == {"filtered": 2}
    assert judge.started == []
    production = _trace(retrieved_documents=DOCS, metadata={"environment": "production"})
    kept = await rules.evaluate(production)
    assert [e.verdict.rule for e in kept.evaluations] == ["groundedness", "missing_citation"]
    assert kept.skipped == {}


async def test_sampling_leaves_out_the_judge_only_and_decides_alike_every_time() -> None:
    judge = GatedJudge()
    judge.open(CITED)
    rules = RuleSet([Groundedness(Evaluator(judge, 0.5, Limits())), MissingCitation()],
                    selections={"groundedness": Selection(rate=0.5)})
    judged = out = 0
    for n in range(200):
        trace = TraceEvent.model_validate({"trace_id": f"trace-{n}", "output": CITED,
                                           "retrieved_documents": DOCS})
        found = await rules.evaluate(trace)
        names = [e.verdict.rule for e in found.evaluations]
        assert "missing_citation" in names, "the deterministic rules run on every trace"
        assert ("groundedness" in names) is sampled(trace.trace_id, 0.5)
        assert (found.skipped == {"groundedness": "sampled_out"}) is (
            "groundedness" not in names)
        judged += "groundedness" in names
        out += found.skipped == {"groundedness": "sampled_out"}
    assert judged + out == 200
    assert 60 < judged < 140
    assert len(judge.started) == judged


async def test_a_rules_own_filter_and_sample_leave_the_other_rules_alone() -> None:
    """Per rule: missing_citation on production traces only, groundedness on a salted half;
    a filter two rules share is evaluated once per trace."""
    judge = GatedJudge()
    judge.open(CITED)
    production = compile_filter("metadata.environment == 'production'")
    rules = RuleSet([Groundedness(Evaluator(judge, 0.5, Limits())), MissingCitation()],
                    selections={"groundedness": Selection(rate=0.5),
                                "missing_citation": Selection(trace_filter=production,
                                                              salt="missing_citation")})
    for n in range(100):
        environment = ("production", "staging")[n % 2]
        trace = _trace(trace_id=f"t-{n}", retrieved_documents=DOCS,
                       metadata={"environment": environment})
        found = await rules.evaluate(trace)
        names = {e.verdict.rule for e in found.evaluations}
        assert ("missing_citation" in names) is (environment == "production")
        assert ("groundedness" in names) is sampled(trace.trace_id, 0.5)
        assert found.skipped == {
            **({} if environment == "production" else {"missing_citation": "filtered"}),
            **({} if sampled(trace.trace_id, 0.5) else {"groundedness": "sampled_out"})}


async def test_a_shared_filter_runs_once_per_trace() -> None:
    shared = compile_filter("metadata.environment == 'production'")
    calls = 0
    keeps = shared.keeps_trace

    def counted(trace: TraceEvent, origin: TraceOrigin | None = None) -> bool:
        nonlocal calls
        calls += 1
        return keeps(trace, origin)

    shared.keeps_trace = counted  # type: ignore[method-assign]
    rules = RuleSet([MissingCitation(), AnsweredWithoutTool()],
                    selections=dict.fromkeys(("missing_citation", "answered_without_tool"),
                                             Selection(trace_filter=shared)))
    found = await rules.evaluate(_trace(retrieved_documents=DOCS, agent=True,
                                        metadata={"environment": "staging"}))
    assert found.skipped == {"missing_citation": "filtered", "answered_without_tool": "filtered"}
    assert calls == 1


async def test_a_rule_left_unselected_takes_every_trace() -> None:
    rules = RuleSet([MissingCitation()], selections={"groundedness": Selection(rate=0.0)})
    found = await rules.evaluate(_trace(retrieved_documents=DOCS))
    assert found.skipped == {}
    assert [e.verdict.rule for e in found.evaluations] == ["missing_citation"]
