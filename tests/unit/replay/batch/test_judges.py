"""The batch replay's stand-in judges inside the replay's own rules: what the collecting pass
keeps (one line per distinct request, under the answer cache's key), and what the answering
pass gives each request: the batch's result as it is, else a synchronous call, never one for
a request whose verdicts an earlier run published."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from consumer import wiring
from consumer.cost.judge_cache import JudgeCache
from consumer.errors import JudgeUnavailable
from consumer.judge.prompt import JudgeRequest, Limits, build_request
from consumer.judge.request_shape import shape_for
from consumer.judge.result import Answered, JudgeResult, TraceFailed
from consumer.replay.batch.command import Collection
from consumer.replay.batch.judges import (
    AnsweringJudge,
    BatchAnswers,
    CollectingJudge,
    request_key,
    request_key_of,
)
from consumer.replay.batch.outcomes import Unanswered
from consumer.replay.batch.runner import FinishedBatch
from consumer.replay.batch.spool import RequestSpool
from consumer.replay.dry_run import DryRunPrices
from consumer.rules.verdicts import verdict_id
from consumer.settings import load_settings
from schemas.judge import JudgeAnswer
from schemas.trace import TraceEvent
from schemas.verdict import Usage

MODEL = "gpt-4o-mini"
DOCS = [{"id": "kb-1", "content": "Refunds are prorated to the day."}]


def trace(trace_id: str, output: str) -> TraceEvent:
    return TraceEvent(trace_id=trace_id, output=output, retrieved_documents=DOCS)


def request(output: str) -> JudgeRequest:
    return build_request(trace("t", output), Limits())


class RecordingJudge:
    """A synchronous judge that answers score 4 and records what it was asked; the first
    ``outages`` calls raise ``JudgeUnavailable``, as an outage does."""

    def __init__(self, outages: int = 0) -> None:
        self.model = MODEL
        self.asked: list[str] = []
        self.outages = outages
        self.closed = False

    @property
    def holding(self) -> bool:
        return self.outages > 0

    async def judge(self, request: JudgeRequest) -> JudgeResult:
        self.asked.append(request_key(MODEL, request))
        if self.outages:
            self.outages -= 1
            raise JudgeUnavailable("judge_http_503", "down for everyone")
        return Answered(JudgeAnswer(score=4, reason="synchronous"), Usage(), 5, 1)

    async def close(self) -> None:
        self.closed = True


async def test_the_collecting_pass_spools_each_distinct_request_once_under_the_cache_key(
    tmp_path: Path,
) -> None:
    settings = load_settings(openai_api_key="sk-test", min_acceptable_score=0.5,
                             judge_model=MODEL, rules="groundedness,missing_citation",
                             judge_cache_size=0)
    traces = [trace("a", "Prorated [1]."), trace("b", "Prorated [1]."),
              trace("c", "Not prorated."), trace("empty", " ")]
    with RequestSpool(tmp_path) as spool:
        rules = wiring.make_rules(settings, CollectingJudge(MODEL, spool))
        collection = Collection(rules, DryRunPrices.of(settings, 0.15))
        for item in traces:
            await collection.count_trace(item)

        keys = {t.trace_id: JudgeCache.key_for(MODEL, build_request(t, wiring.limits(settings)))
                for t in traces[:3]}
        assert keys["a"] == keys["b"] != keys["c"]
        assert sorted(spool) == sorted({keys["a"], keys["c"]}), "identical requests: one line"
        line = json.loads(spool[keys["c"]].data)
        asked = build_request(traces[2], wiring.limits(settings))
        assert line == {"custom_id": keys["c"], "method": "POST", "url": "/v1/chat/completions",
                        "body": shape_for(MODEL).body(MODEL, asked.messages)}
        # Each groundedness verdict is traced to its request; the deterministic rule's are not.
        assert collection.request_of == {verdict_id(t): keys[t] for t in ("a", "b", "c")}
        assert collection.verdicts_by_request() == {
            keys["a"]: [verdict_id("a"), verdict_id("b")], keys["c"]: [verdict_id("c")]}
        assert collection.by_rule["missing_citation", "fail"] == 1
        assert collection.left_out["skipped"] == 1


def test_only_a_collecting_placeholder_names_a_request() -> None:
    key = request_key(MODEL, request("Prorated."))
    placeholder = Answered(JudgeAnswer(score=5, reason=key), None, 0, 0)
    assert request_key_of(placeholder) == key
    assert request_key_of(Answered(JudgeAnswer(score=5, reason=key), None, 9, 1)) is None
    assert request_key_of(Answered(JudgeAnswer(score=5, reason="fine"), None, 0, 0)) is None
    assert request_key_of(TraceFailed("x", key, None, 0, 0)) is None
    assert request_key_of(None) is None


def answers_for(**outcomes: JudgeResult | Unanswered) -> BatchAnswers:
    """Batch answers keyed by the request for each keyword's text."""
    answers = BatchAnswers()
    results = {request_key(MODEL, request(text)): o for text, o in outcomes.items()
               if not isinstance(o, Unanswered)}
    unanswered = {request_key(MODEL, request(text)): o for text, o in outcomes.items()
                  if isinstance(o, Unanswered)}
    answers.add(FinishedBatch("batch_1", "completed", results, unanswered, ()))
    return answers


@pytest.mark.usefixtures("default_structlog")
async def test_the_batch_answers_as_it_is_and_what_it_failed_goes_synchronously() -> None:
    answered = Answered(JudgeAnswer(score=2, reason="from the batch"), Usage(
        prompt_tokens=10, completion_tokens=2, total_tokens=12), 3000, 1)
    too_long = TraceFailed("context_too_long", "too long", None, 3000, 1)
    failed = Unanswered("k", "judge_http_500", "Error code: 500 - The server had an error")
    synchronous = RecordingJudge()
    judge = AnsweringJudge(answers_for(good=answered, long=too_long, flaky=failed),
                           synchronous, published=lambda key: False)

    assert await judge.judge(request("good")) is answered
    assert await judge.judge(request("long")) is too_long, "the trace's own error, as it is"
    assert synchronous.asked == []
    flaky = await judge.judge(request("flaky"))
    assert isinstance(flaky, Answered)
    assert flaky.answer.reason == "synchronous"
    with capture_logs() as logs:
        missing = await judge.judge(request("never batched"))
    assert isinstance(missing, Answered)
    assert [e["event"] for e in logs] == ["batch_request_missing"]
    assert synchronous.asked == [request_key(MODEL, request("flaky")),
                                 request_key(MODEL, request("never batched"))]
    assert judge.sent_synchronously == {"judge_http_500": 1, "missing": 1}
    assert judge.answered_by_batch(request_key(MODEL, request("good")))
    assert not judge.answered_by_batch(request_key(MODEL, request("flaky")))
    assert judge.model == MODEL
    await judge.close()
    assert synchronous.closed


async def test_a_request_whose_verdicts_were_published_is_not_paid_for_again() -> None:
    failed = Unanswered("k", "batch_expired", "the batch expired before answering it")
    synchronous = RecordingJudge()
    key = request_key(MODEL, request("expired"))
    judge = AnsweringJudge(answers_for(expired=failed), synchronous,
                           published=lambda asked: asked == key)

    result = await judge.judge(request("expired"))

    assert synchronous.asked == []
    assert isinstance(result, TraceFailed)
    assert (result.kind, result.message) == ("batch_expired", failed.message)
    assert sum(judge.sent_synchronously.values()) == 0


async def test_a_request_held_by_an_outage_counts_once_and_the_judge_holds_meanwhile() -> None:
    synchronous = RecordingJudge(outages=1)
    judge = AnsweringJudge(answers_for(flaky=Unanswered("k", "judge_http_503", "busy")),
                           synchronous, published=lambda key: False)
    assert judge.holding
    with pytest.raises(JudgeUnavailable):
        await judge.judge(request("flaky"))
    result = await judge.judge(request("flaky"))  # the evaluator asks again once it is back
    assert isinstance(result, Answered)
    assert not judge.holding
    assert judge.sent_synchronously == {"judge_http_503": 1}


def test_a_later_batch_answer_wins_over_an_earlier_batch_giving_none() -> None:
    answers = BatchAnswers()
    answer = Answered(JudgeAnswer(score=5, reason="ok"), None, 1, 1)
    answers.add(FinishedBatch("b1", "cancelled", {}, {"k": Unanswered("k", "x", "y")}, ()))
    answers.add(FinishedBatch("b2", "completed", {"k": answer}, {}, ()))
    answers.add(FinishedBatch("b3", "failed", {}, {"k": Unanswered("k", "x", "y")}, ()))
    assert (answers.results, answers.unanswered) == ({"k": answer}, {})
