"""The hostile corpus through the real worker at once: every record ends as expected, no
partition stalls, and the worker still judges normal traces afterwards (invariant 5)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from aiokafka import ConsumerRecord

from consumer.judge.prompt import FENCE_CLOSE, FENCE_OPEN, USER_PREAMBLE, read_data
from consumer.localjudge.server import JudgeServer
from tests.support.fake_judge import ScriptedJudge
from tests.support.hostile import (
    CORPUS,
    DEAD_LETTERS,
    JUDGED,
    SKIPPED,
    Case,
    DeadLetter,
    Judged,
    Skipped,
)
from tests.support.ports import free_port
from tests.support.streams import (
    Topics,
    create_topics,
    group_offsets,
    in_process_worker,
    produce,
    read_all,
    trace,
    verdicts_by_trace,
)

pytestmark = pytest.mark.integration

LIMITS = {"MAX_DOCUMENTS": "12", "MAX_DOCUMENT_CHARS": "2000", "MAX_OUTPUT_CHARS": "4000"}
HEALTHY_TRACE_ID = "after-the-corpus"


async def http_status(port: int, path: str) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
                     .encode())
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 5)
        return int(status_line.split()[1])
    finally:
        writer.close()
        await writer.wait_closed()


async def wait_for_commits(kafka: str, topics: Topics, timeout_s: float) -> tuple[
        dict[int, int], dict[int, int]]:
    """(committed, end offsets) once they are equal on every partition, or at the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        committed, ends = await group_offsets(kafka, topics.group, topics.traces)
        if committed == ends or time.monotonic() > deadline:
            return committed, ends
        await asyncio.sleep(0.5)


def fenced_block(request: dict[str, Any]) -> str:
    user = request["messages"][-1]["content"]
    assert isinstance(user, str)
    assert user.startswith(USER_PREAMBLE + FENCE_OPEN)
    assert user.endswith(FENCE_CLOSE)
    return user[len(USER_PREAMBLE + FENCE_OPEN) : -len(FENCE_CLOSE)]


def carries(record: ConsumerRecord[bytes, bytes], case: Case) -> bool:
    """Is ``record`` the dead letter of ``case``: its key, and its value (or, for an original
    too large to carry the DLQ headers, the value's head and its original size)?"""
    if record.key != case.key:
        return False
    cut = dict(record.headers).get("dlq.value_truncated")
    if cut is None or case.value is None or record.value is None:
        return bool(record.value == case.value)
    return case.value.startswith(record.value) and int(cut) == len(case.value)


def check_dead_letters(dead: list[ConsumerRecord[bytes, bytes]], traces_topic: str) -> None:
    assert len(dead) == len(DEAD_LETTERS), "one dead letter per bad record"
    for case in DEAD_LETTERS:
        assert isinstance(case.expect, DeadLetter)
        matches = [record for record in dead if carries(record, case)]
        assert len(matches) == 1, f"{case.id}: {len(matches)} dead letters with its key and value"
        headers = dict(matches[0].headers)
        reason = headers["dlq.reason"].decode()
        assert case.expect.reason in reason, (case.id, reason)
        assert len(reason) <= 300
        assert len(reason.splitlines()) == 1, (case.id, reason)
        assert not reason.startswith("internal error"), f"{case.id}: the worker crashed: {reason}"
        assert headers["dlq.source.topic"].decode() == traces_topic


def check_verdicts(verdicts: dict[str, list[dict[str, Any]]],
                   records: list[ConsumerRecord[bytes, bytes]]) -> None:
    assert set(verdicts) == {case.expect.trace_id for case in JUDGED
                             if isinstance(case.expect, Judged)} | {HEALTHY_TRACE_ID}
    for case in JUDGED:
        assert isinstance(case.expect, Judged)
        (verdict,) = verdicts[case.expect.trace_id]
        assert verdict["verdict"] == case.expect.verdict, case.id
        assert verdict["error"] is None, case.id
        assert verdict["truncation"] == case.expect.truncation.model_dump(), case.id
    for case in SKIPPED:
        assert isinstance(case.expect, Skipped)
        assert case.expect.trace_id not in verdicts, f"{case.id}: an empty output was judged"
    for record in records:  # the key is the UUIDv5 verdict id, even for a 1,024-char trace id
        assert record.key is not None
        assert len(record.key) == 36
        assert record.key == json.loads(record.value or b"{}")["verdict_id"].encode()


def check_fences(judge: ScriptedJudge) -> None:
    """Every request kept the data inside its fence; injected texts arrived verbatim as data."""
    calls = [call for call in judge.calls if call.answer != "probe"]
    assert calls
    for call in calls:
        assert not set(fenced_block(call.request)) & set("`<>\n"), call.answer[:80]
    for case in JUDGED:
        assert isinstance(case.expect, Judged)
        if not case.expect.fenced:
            continue
        assert case.value is not None
        answer = json.loads(case.value)["output"]
        (call, *_) = [c for c in calls if c.answer == answer]
        data = read_data(call.request["messages"])
        texts = [data["answer"], data.get("task_instructions", ""),
                 *(d["content"] for d in data["documents"])]
        for hostile in case.expect.fenced:
            assert hostile in texts, case.id


async def test_hostile_corpus_never_stops_a_partition(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    judge, server = fake_judge
    topics = Topics.fresh("hostile")
    await create_topics(kafka, topics, partitions=3)
    await produce(kafka, topics.traces, [case.value for case in CORPUS],
                  keys=[case.key for case in CORPUS])
    health_port = free_port()
    env = topics.env(kafka) | LIMITS | {
        "OPENAI_API_KEY": "sk-test-secret-value",
        "OPENAI_BASE_URL": server.url,
        "JUDGE_MODEL": "scripted-judge",
        "MIN_ACCEPTABLE_SCORE": "0.5",
        "JUDGE_MAX_CONCURRENCY": "8",
        "JUDGE_TIMEOUT_SECONDS": "10",
        "DELIVERY": "at_least_once",
        "CONTEXT_FIELD": "retrieved_documents",
        "HEALTH_PORT": str(health_port),
        "LOG_LEVEL": "warning",
    }

    async with in_process_worker(env, monkeypatch) as task:
        await read_all(kafka, topics.verdicts, at_least=len(JUDGED), timeout_s=40)
        dead = await read_all(kafka, topics.dlq, at_least=len(DEAD_LETTERS), timeout_s=20)
        committed, ends = await wait_for_commits(kafka, topics, timeout_s=15)
        assert committed == ends, "a partition stalled behind a hostile record"
        assert sum(ends.values()) == len(CORPUS)
        assert len(ends) == 3

        # Still healthy: alive, and a normal trace produced now gets its verdict.
        assert not task.done()
        assert await http_status(health_port, "/healthz") == 200
        await produce(kafka, topics.traces, [trace(HEALTHY_TRACE_ID, "Paris. [[score=5]]",
                                                   retrieved_documents=["Paris."])])
        records = await read_all(kafka, topics.verdicts, at_least=len(JUDGED) + 1,
                                 timeout_s=20, settle_s=0.5)
        assert not task.done()

    committed, ends = await group_offsets(kafka, topics.group, topics.traces)
    assert committed == ends
    assert sum(ends.values()) == len(CORPUS) + 1

    verdicts = verdicts_by_trace(records)
    assert verdicts[HEALTHY_TRACE_ID][0]["verdict"] == "pass"
    check_verdicts(verdicts, records)
    check_dead_letters(dead, topics.traces)
    check_fences(judge)
