"""Verdict rules: pass at or above the threshold, error never passes, ids deterministic."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import pytest
from pydantic import ValidationError

from consumer.judge.prompt import parse_answer
from consumer.judge.result import Answered, TraceFailed
from consumer.redaction import known_secrets
from consumer.rules.verdicts import (
    MAX_CLAIM_CHARS,
    MAX_CLAIMS,
    MAX_ERROR_MESSAGE_CHARS,
    MAX_JUDGE_MODEL_CHARS,
    MAX_ORIGIN_ID_CHARS,
    MAX_VERDICT_REASON_CHARS,
    Context,
    errored,
    judged,
    verdict_id,
)
from consumer.telemetry.origin import TraceOrigin
from schemas.judge import JudgeAnswer
from schemas.trace import MAX_TRACE_ID_CHARS, TraceEvent
from schemas.verdict import Assembly, Source, Truncation, Usage, VerdictEvent

TRACE = TraceEvent(trace_id="trace-1", output="answer")
SOURCE = Source(topic="llm-traces", partition=2, offset=41)
FROM_SPANS = frozenset({"span_id", "project_id", "session_id", "context_source", "assembly"})
COST_FIELDS = frozenset({"cached", "cost_usd"})  # left out unless cached / priced
ORIGIN = TraceOrigin(span_id="00f067aa0ba902b7", project_id="rag-app", session_id="s-9",
                     context_source="retrieval", spans=4, root_seen=True, closed_by="quiet")


def ctx(threshold: float) -> Context:
    return Context("judge-model", threshold, Truncation(), SOURCE)


@pytest.mark.parametrize(
    ("raw", "threshold", "outcome"),
    [
        pytest.param(3, 0.5, "pass", id="at-threshold-passes"),
        pytest.param(2, 0.5, "fail", id="below-fails"),
        pytest.param(5, 1.0, "pass", id="perfect-at-one"),
        pytest.param(4, 1.0, "fail", id="four-below-one"),
        pytest.param(1, 0.0, "pass", id="zero-threshold"),
        pytest.param(4, 0.75, "pass", id="quarter-step"),
    ],
)
def test_pass_when_score_reaches_threshold(raw: int, threshold: float, outcome: str) -> None:
    answer = JudgeAnswer(score=raw, reason="r", unsupported_claims=[])
    verdict = judged(TRACE, Answered(answer, None, 12, 1), ctx(threshold))
    assert verdict.verdict == outcome
    assert verdict.score == (raw - 1) / 4
    assert verdict.raw_score == raw
    assert verdict.threshold == threshold


def test_error_has_no_score_and_never_passes() -> None:
    verdict = errored(TRACE, TraceFailed("refused", "no", None, 5, 1), ctx(0.0))
    assert verdict.verdict == "error"
    assert verdict.score is None
    assert verdict.raw_score is None
    assert verdict.error is not None
    assert (verdict.error.type, verdict.error.message) == ("refused", "no")


def test_verdict_carries_the_contract_fields() -> None:
    verdict = judged(TRACE, Answered(JudgeAnswer(score=4, reason="ok"), None, 7, 1), ctx(0.5))
    data = verdict.model_dump(mode="json")
    assert set(data) == set(VerdictEvent.model_fields) - FROM_SPANS - COST_FIELDS
    assert data["schema_version"] == 1
    assert data["rule"] == "groundedness"
    assert data["prompt_version"] == "groundedness@v1"
    assert data["judge_model"] == "judge-model"
    assert data["source"] == {"topic": "llm-traces", "partition": 2, "offset": 41}
    assert data["evaluated_at"].endswith("Z")


# Published before the fields from spans existed (a trace_json verdict, as the sink wrote it).
OLD_JUDGED = (
    '{"schema_version":1,"verdict_id":"c14708cf-2770-58fd-8a9c-43991aa9e6f1",'
    '"trace_id":"trace-1","rule":"groundedness","prompt_version":"groundedness@v1",'
    '"judge_model":"judge-model","verdict":"pass","score":0.75,"raw_score":4,"threshold":0.5,'
    '"reason":"ok","unsupported_claims":["c"],"error":null,"truncation":'
    '{"documents_received":0,"documents_dropped":0,"documents_cut":[],"document_chars_cut":0,'
    '"output_chars_cut":0,"input_chars_cut":0},"usage":null,"latency_ms":7,'
    '"evaluated_at":"2025-01-01T00:00:00.000Z","source":{"topic":"llm-traces","partition":2,'
    '"offset":41}}'
)
OLD_ERRORED = (
    '{"schema_version":1,"verdict_id":"c14708cf-2770-58fd-8a9c-43991aa9e6f1",'
    '"trace_id":"trace-1","rule":"groundedness","prompt_version":"groundedness@v1",'
    '"judge_model":"judge-model","verdict":"error","score":null,"raw_score":null,'
    '"threshold":0.5,"reason":null,"unsupported_claims":[],"error":{"type":"x","message":"y"},'
    '"truncation":{"documents_received":0,"documents_dropped":0,"documents_cut":[],'
    '"document_chars_cut":0,"output_chars_cut":0,"input_chars_cut":0},"usage":null,'
    '"latency_ms":1,"evaluated_at":"2025-01-01T00:00:00.000Z","source":null}'
)
FIXED_TIME = {"evaluated_at": "2025-01-01T00:00:00.000Z"}


@pytest.mark.parametrize(
    ("make", "published"),
    [
        pytest.param(lambda: judged(TRACE, Answered(JudgeAnswer(score=4, reason="ok",
                                                                unsupported_claims=["c"]),
                                                    None, 7, 1), ctx(0.5)),
                     OLD_JUDGED, id="judged"),
        pytest.param(lambda: errored(TRACE, TraceFailed("x", "y", None, 1, 1),
                                     Context("judge-model", 0.5, Truncation(), None)),
                     OLD_ERRORED, id="errored"),
    ],
)
def test_a_trace_json_verdict_is_byte_for_byte_what_it_was(
    make: Callable[[], VerdictEvent], published: str
) -> None:
    """The fields from spans are omitted when unset: consumers of trace_json see no change."""
    verdict = make().model_copy(update=FIXED_TIME)
    assert verdict.model_dump_json() == published
    assert VerdictEvent.model_validate_json(published).model_dump_json() == published


def test_a_verdict_from_spans_carries_its_origin() -> None:
    context = Context("judge-model", 0.5, Truncation(), SOURCE, origin=ORIGIN)
    verdict = judged(TRACE, Answered(JudgeAnswer(score=4, reason="ok"), None, 7, 1), context)
    data = json.loads(verdict.model_dump_json())
    assert set(data) == set(VerdictEvent.model_fields) - COST_FIELDS
    assert (data["span_id"], data["project_id"], data["session_id"]) == (
        "00f067aa0ba902b7", "rag-app", "s-9")
    assert data["context_source"] == "retrieval"
    assert data["assembly"] == {"spans": 4, "root_seen": True, "closed_by": "quiet", "capped": 0}
    assert VerdictEvent.model_validate_json(verdict.model_dump_json()) == verdict
    failed = errored(TRACE, TraceFailed("x", "y", None, 1, 1), context)
    assert failed.assembly == Assembly(spans=4, root_seen=True, closed_by="quiet")


@pytest.mark.parametrize(
    ("trace_id", "carried"),
    [
        pytest.param("4bf92f3577b34da6a3ce929d0e0e4736", True, id="otel-trace-id"),
        pytest.param("4BF92F3577B34DA6A3CE929D0E0E4736", True, id="upper-case"),
        pytest.param("0" * 32, False, id="all-zero-is-no-otel-id"),
        pytest.param("trace-1", False, id="not-an-otel-id"),
    ],
)
def test_a_trace_json_span_id_is_carried_beside_an_otel_trace_id_only(
    trace_id: str, carried: bool
) -> None:
    # Beside any other trace id the span id names no OTel span: the verdict says nothing.
    trace = TraceEvent(trace_id=trace_id, span_id="00f067aa0ba902b7", output="answer")
    verdict = judged(trace, Answered(JudgeAnswer(score=4, reason="ok"), None, 7, 1), ctx(0.5))
    assert verdict.span_id == ("00f067aa0ba902b7" if carried else None)
    assert set(json.loads(verdict.model_dump_json())) & FROM_SPANS == (
        {"span_id"} if carried else set())


def test_unknown_project_and_session_are_left_out() -> None:
    origin = TraceOrigin(span_id="00f067aa0ba902b7", project_id=None, session_id=None,
                         context_source="llm_input", spans=1, root_seen=False,
                         closed_by="max_wait")
    context = Context("judge-model", 0.5, Truncation(), SOURCE, origin=origin)
    data = json.loads(judged(TRACE, Answered(JudgeAnswer(score=4, reason="ok"), None, 7, 1),
                             context).model_dump_json())
    assert "project_id" not in data
    assert "session_id" not in data
    assert (data["context_source"], data["assembly"]["closed_by"]) == ("llm_input", "max_wait")


@pytest.mark.parametrize(
    "origin",
    [
        pytest.param(dataclasses.replace(ORIGIN, context_source="documents"),
                     id="context-source"),
        pytest.param(dataclasses.replace(ORIGIN, closed_by="timeout"), id="closed-by"),
    ],
)
def test_an_origin_outside_the_contract_is_refused(origin: TraceOrigin) -> None:
    context = Context("judge-model", 0.5, Truncation(), SOURCE, origin=origin)
    with pytest.raises(ValidationError):
        judged(TRACE, Answered(JudgeAnswer(score=4, reason="ok"), None, 7, 1), context)


def test_verdict_id_is_deterministic_per_trace_and_prompt_version() -> None:
    assert verdict_id("trace-1") == verdict_id("trace-1")
    assert verdict_id("trace-1") != verdict_id("trace-2")
    assert verdict_id("trace-1", "groundedness@v2") != verdict_id("trace-1")
    first = judged(TRACE, Answered(JudgeAnswer(score=4, reason="a"), None, 1, 1), ctx(0.5))
    again = errored(TRACE, TraceFailed("x", "y", None, 1, 1), ctx(0.9))
    assert first.verdict_id == again.verdict_id == verdict_id("trace-1")


def test_secrets_are_redacted_from_what_the_judge_wrote() -> None:
    secret = "sk-live-0123456789abcdef"
    context = Context("judge-model", 0.5, Truncation(), SOURCE, secrets=(secret,))
    answer = JudgeAnswer(score=2, reason=f"saw {secret}", unsupported_claims=[secret, "ok"])
    verdict = judged(TRACE, Answered(answer, None, 1, 1), context)
    assert (verdict.reason, verdict.unsupported_claims) == (
        "saw [REDACTED]", ["[REDACTED]", "ok"])
    failed = TraceFailed("judge_http_400", f"Bearer {secret[:10]}", None, 1, 1)
    error = errored(TRACE, failed, context)
    assert error.error is not None
    assert error.error.message == "Bearer [REDACTED]"


# 168 characters, as OpenAI's project keys are.
LONG_KEY = "sk-proj-" + "A1b2C3d4" * 20


ID_SECRET = "sk-live-0123456789abcdef"


@pytest.mark.parametrize(
    ("field", "origin"),
    [
        pytest.param("span_id", dataclasses.replace(ORIGIN, span_id=f"user-{ID_SECRET}"),
                     id="span-id"),
        pytest.param("project_id", dataclasses.replace(ORIGIN, project_id=f"user-{ID_SECRET}"),
                     id="project-id"),
        pytest.param("session_id", dataclasses.replace(ORIGIN, session_id=f"user-{ID_SECRET}"),
                     id="session-id"),
    ],
)
def test_secrets_are_redacted_from_the_ids_the_application_wrote(
    field: str, origin: TraceOrigin
) -> None:
    """Project, session and span ids are span attributes: a secret in one is redacted."""
    secret = ID_SECRET
    context = Context("judge-model", 0.5, Truncation(), SOURCE, secrets=(secret,), origin=origin)
    for verdict in (judged(TRACE, Answered(JudgeAnswer(score=4, reason="ok"), None, 7, 1),
                           context),
                    errored(TRACE, TraceFailed("x", "y", None, 1, 1), context)):
        assert getattr(verdict, field) == "user-[REDACTED]"
        assert "0123456789" not in verdict.model_dump_json()


def test_a_secret_straddling_the_origin_id_bound_is_redacted_before_the_cut() -> None:
    session = "s" * (MAX_ORIGIN_ID_CHARS - 10) + LONG_KEY
    origin = dataclasses.replace(ORIGIN, session_id=session)
    context = Context("m", 0.5, Truncation(), None, known_secrets([LONG_KEY]), origin)
    verdict = judged(TRACE, Answered(JudgeAnswer(score=4, reason="ok"), None, 7, 1), context)
    assert verdict.session_id == "s" * (MAX_ORIGIN_ID_CHARS - 10) + "[REDACTED]"
    assert_no_key_head(verdict.model_dump_json())




@pytest.mark.parametrize("field", ["reason", "claim"])
@pytest.mark.parametrize("before_cut", [1, 8, len(LONG_KEY) - 1])
def test_a_secret_straddling_a_bound_is_redacted_before_the_cut(
    field: str, before_cut: int
) -> None:
    """The bound cuts the text after redaction: a key the cut falls inside (``before_cut`` of
    its characters before the bound) is redacted whole, not left as a head ending in "…"."""
    bound = MAX_VERDICT_REASON_CHARS if field == "reason" else MAX_CLAIM_CHARS
    text = "x" * (bound - 1 - before_cut) + LONG_KEY + " and more"
    answer = parse_answer(json.dumps({
        "score": 3, "reason": text if field == "reason" else "r",
        "unsupported_claims": [text] if field == "claim" else [],
    }))
    context = Context("m", 0.5, Truncation(), None, known_secrets([LONG_KEY]))
    verdict = judged(TRACE, Answered(answer, None, 1, 1), context)
    written = verdict.reason if field == "reason" else verdict.unsupported_claims[0]
    assert written is not None
    assert len(written) <= bound
    assert LONG_KEY[:4] not in written
    assert_no_key_head(verdict.model_dump_json())


def assert_no_key_head(text: str) -> None:
    assert "A1b2" not in text, "part of the key was published"


def test_an_overlong_answer_is_cut_to_fit_a_verdict() -> None:
    """An endpoint that ignores max_tokens cannot make a verdict too large to publish."""
    claims = [f"claim {i} " + "c" * 5000 for i in range(MAX_CLAIMS + 10)]
    answer = parse_answer(json.dumps({"score": 2, "reason": "r" * 100_000,
                                      "unsupported_claims": claims}))
    verdict = judged(TRACE, Answered(answer, None, 1, 1), ctx(0.5))
    assert verdict.raw_score == 2
    assert verdict.reason is not None
    assert len(verdict.reason) == MAX_VERDICT_REASON_CHARS
    assert verdict.reason.endswith("…")
    assert len(verdict.unsupported_claims) == MAX_CLAIMS
    assert all(len(claim) == MAX_CLAIM_CHARS for claim in verdict.unsupported_claims)
    assert verdict.unsupported_claims[3].startswith("claim 3 ccc")


def test_an_answer_within_the_bounds_is_kept_whole() -> None:
    claims = ["x" * MAX_CLAIM_CHARS] * MAX_CLAIMS
    answer = JudgeAnswer(score=2, reason="r" * MAX_VERDICT_REASON_CHARS, unsupported_claims=claims)
    verdict = judged(TRACE, Answered(answer, None, 1, 1), ctx(0.5))
    assert (verdict.reason, verdict.unsupported_claims) == ("r" * MAX_VERDICT_REASON_CHARS, claims)


def test_a_long_error_message_is_cut() -> None:
    verdict = errored(TRACE, TraceFailed("judge_http_400", "m" * 100_000, None, 1, 1), ctx(0.5))
    assert verdict.error is not None
    assert len(verdict.error.message) == MAX_ERROR_MESSAGE_CHARS
    assert verdict.error.message.endswith("…")


# Every character of text becomes at most six bytes of JSON (a control character: \u0000).
WORST_CHAR = "\x00"


def test_the_largest_possible_verdict_fits_a_kafka_record() -> None:
    """The judge's text, the error message and the trace id are bounded, so a verdict is
    always publishable (Kafka's default record limit is 1 MiB), whatever the judge returns."""
    trace = TraceEvent(trace_id="\U0001f600" * MAX_TRACE_ID_CHARS, output="x")
    huge = WORST_CHAR * 20_000  # each text is far over its bound (and 200 claims over theirs)
    answer = parse_answer(json.dumps({"score": 1, "reason": huge,
                                      "unsupported_claims": [huge] * 200}))
    source = Source(topic="t" * 249, partition=2**31 - 1, offset=2**63 - 1)
    # Span attributes are the application's: a huge project or session id is cut.
    origin = TraceOrigin(span_id=huge, project_id=huge, session_id=huge,
                         context_source="retrieval", spans=2**31, root_seen=True,
                         closed_by="max_wait")
    context = Context("m" * 256, 0.5, Truncation(documents_cut=list(range(12))), source,
                      origin=origin)
    for verdict in (judged(trace, Answered(answer, Usage(), 2**31, 1), context),
                    errored(trace, TraceFailed("judge_http_400", huge, None, 1, 1), context)):
        size = len(verdict.model_dump_json().encode("utf-8")) + len(verdict.verdict_id)
        assert size < 512 * 1024, verdict.verdict
        assert verdict.project_id is not None
        assert len(verdict.project_id) == MAX_ORIGIN_ID_CHARS


@pytest.mark.parametrize(
    ("answered_as", "named"),
    [
        pytest.param("judge-model-2024-07-18", "judge-model-2024-07-18", id="as-answered"),
        pytest.param(None, "judge-model", id="none-named-the-asked"),
        pytest.param("  ", "judge-model", id="blank-the-asked"),
        pytest.param("x" * 1_000, "x" * (MAX_JUDGE_MODEL_CHARS - 1) + "…", id="bounded"),
        pytest.param("proxy/sk-live-0123456789abcdef", "proxy/[REDACTED]", id="redacted"),
    ],
)
def test_judge_model_is_the_answering_model_bounded_and_redacted(
    answered_as: str | None, named: str
) -> None:
    context = Context("judge-model", 0.5, Truncation(), SOURCE,
                      secrets=known_secrets(["sk-live-0123456789abcdef"]))
    answer = JudgeAnswer(score=4, reason="ok")
    verdicts = [judged(TRACE, Answered(answer, None, 7, 1, answered_as), context),
                errored(TRACE, TraceFailed("x", "y", None, 1, 1, answered_as), context)]
    assert [v.judge_model for v in verdicts] == [named, named]
    assert {v.verdict_id for v in verdicts} == {verdict_id(TRACE.trace_id)}
