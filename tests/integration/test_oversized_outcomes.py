"""Records as large as the broker takes, and a judge answer far larger, through the real
worker: every outcome fits the broker, so no partition stalls retrying one (invariant 10).

The inputs fill the producer's limit to within a few bytes, so a dead letter that merely
added its headers, or a verdict that carried a 1 MB trace id or the judge's every word,
would be refused by the producer and retried for ever.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, ConsumerRecord

from consumer.judge.prompt import read_data
from consumer.localjudge.replies import Reply, completion
from consumer.localjudge.server import JudgeServer
from tests.support.records import Parts, filled, producible
from tests.support.streams import (
    Topics,
    create_topics,
    in_process_worker,
    read_all,
    trace,
    verdicts_by_trace,
)
from tests.support.workers import wait_committed, worker_env

pytestmark = pytest.mark.integration

DELIVERIES = ["at_least_once", "exactly_once"]
HUGE = "[[huge]]"
HUGE_TEXT = "x" * 3_000_000  # the judge's reason; it claims 1,000 times its first 3,000
SLACK_BYTES = 16  # how far under the producer's limit each big input record is
TOO_LONG = "trace_id: String should have at most 1024 characters"


Built = tuple[bytes, bytes, list[tuple[str, bytes]]]


def huge_trace_id(n: int) -> Built:
    return b"huge-trace-id", json.dumps({"trace_id": "N" * n, "output": "x"}).encode(), []


def huge_key_and_header(n: int) -> Built:
    return b"K" * 600_000, b"{not json: key and header}", [("big", b"h" * n)]


def huge_key(n: int) -> Built:
    return b"Q" * n, b"{not json: key}", []


class HugeAnswers:
    """A judge that answers score 5, except for an answer holding ``[[huge]]``: score 1 with
    a reason and claims far beyond any record limit (an endpoint ignoring ``max_tokens``)."""

    def __call__(self, request: dict[str, Any]) -> Reply:
        try:
            answer = read_data(request["messages"])["answer"]
        except ValueError:  # a health probe
            return Reply(body=completion('{"ok": true}', "big-judge", 5, 5))
        body: dict[str, Any] = {"score": 5, "reason": "Supported.", "unsupported_claims": []}
        if HUGE in answer:
            body = {"score": 1, "reason": HUGE_TEXT,
                    "unsupported_claims": [HUGE_TEXT[:3000]] * 1000}
        return Reply(body=completion(json.dumps(body), "big-judge", 100, 20))


@contextmanager
def big_judge() -> Iterator[JudgeServer]:
    with JudgeServer(HugeAnswers(), models=("big-judge",)) as server:
        yield server


async def produce_records(bootstrap: str, topic: str, records: list[Parts]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        for key, value, headers in records:
            assert producible(key, value, headers)
            await producer.send(topic, value, key=key, headers=list(headers), partition=0)
        await producer.flush()
    finally:
        await producer.stop()


def big_judge_env(kafka: str, topics: Topics, server: JudgeServer,
                  delivery: str) -> dict[str, str]:
    """The worker's environment against ``big_judge`` (slow answers: a longer timeout)."""
    return worker_env(topics.env(kafka), server.url, JUDGE_MODEL="big-judge",
                      JUDGE_MAX_CONCURRENCY="4", JUDGE_TIMEOUT_SECONDS="30",
                      DELIVERY=delivery, DRAIN_TIMEOUT_SECONDS="5")


def headers_of(record: ConsumerRecord[bytes, bytes]) -> dict[str, bytes]:
    return dict(record.headers)


@pytest.mark.parametrize("delivery", DELIVERIES)
async def test_outcomes_too_large_for_the_broker_are_cut_to_fit(
    kafka: str, monkeypatch: pytest.MonkeyPatch, delivery: str
) -> None:
    topics = Topics.fresh("oversized")
    await create_topics(kafka, topics, partitions=1)
    id_key, id_value, _ = big_id = filled(huge_trace_id, SLACK_BYTES)
    pair_key, pair_value, pair_headers = big_pair = filled(huge_key_and_header, SLACK_BYTES)
    await produce_records(kafka, topics.traces, [
        (b"before", trace("before", "Fine."), []),
        big_id,
        big_pair,
        (b"huge-answer", trace("huge-answer", f"Made up. {HUGE}"), []),
        (b"after", trace("after", "Fine too."), []),
    ])

    with big_judge() as server:
        async with in_process_worker(big_judge_env(kafka, topics, server, delivery), monkeypatch):
            dead = await read_all(kafka, topics.dlq, at_least=2, timeout_s=60)
            verdict_records = await read_all(kafka, topics.verdicts, at_least=3, timeout_s=60)
            committed, ends = await wait_committed(kafka, topics.group, topics.traces, 30)
            assert committed == ends == {0: 5}, "the partition stalled behind an outcome"
            # Still working: a trace produced now gets its verdict and its offset committed.
            await produce_records(kafka, topics.traces, [(b"later", trace("later", "Ok."), [])])
            verdict_records = await read_all(kafka, topics.verdicts, at_least=4, timeout_s=30,
                                             settle_s=0.5)
            committed, ends = await wait_committed(kafka, topics.group, topics.traces, 30)
            assert committed == ends == {0: 6}

    verdicts = verdicts_by_trace(verdict_records)
    assert set(verdicts) == {"before", "huge-answer", "after", "later"}
    (huge,) = verdicts["huge-answer"]
    assert (huge["verdict"], huge["raw_score"]) == ("fail", 1)
    assert huge["reason"] == HUGE_TEXT[:1999] + "…"
    assert len(huge["unsupported_claims"]) == 50

    by_key = {record.key[:20] if record.key else b"": record for record in dead}
    assert len(dead) == 2
    # A 1 MB trace id: refused at decode; the value, cut by what the headers needed.
    id_letter = by_key[id_key[:20]]
    assert TOO_LONG in headers_of(id_letter)["dlq.reason"].decode()
    assert id_letter.key == id_key
    assert id_letter.value is not None
    assert id_value.startswith(id_letter.value)
    assert headers_of(id_letter)["dlq.value_truncated"] == str(len(id_value)).encode()
    # A 600 kB key and a 448 kB header: the key and value whole, the header left out.
    pair_letter = by_key[pair_key[:20]]
    assert "not valid JSON" in headers_of(pair_letter)["dlq.reason"].decode()
    assert (pair_letter.key, pair_letter.value) == (pair_key, pair_value)
    assert headers_of(pair_letter)["dlq.headers_dropped"] == b"1"
    assert "big" not in headers_of(pair_letter)
    assert len(pair_headers[0][1]) > 400_000


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
async def test_a_key_too_large_for_a_dead_letter_is_cut(
    kafka: str, monkeypatch: pytest.MonkeyPatch, delivery: str
) -> None:
    topics = Topics.fresh("oversized-key")
    await create_topics(kafka, topics, partitions=1)
    key, value, _ = big_key = filled(huge_key, SLACK_BYTES)
    await produce_records(kafka, topics.traces, [big_key, (b"after", trace("after", "Ok."), [])])

    with big_judge() as server:
        async with in_process_worker(big_judge_env(kafka, topics, server, delivery), monkeypatch):
            verdict_records = await read_all(kafka, topics.verdicts, at_least=1, timeout_s=20)
            dead = await read_all(kafka, topics.dlq, at_least=1, timeout_s=5)
            committed, ends = await wait_committed(kafka, topics.group, topics.traces, 15)
    assert committed == ends == {0: 2}, "the partition stalled behind the dead letter"
    assert set(verdicts_by_trace(verdict_records)) == {"after"}
    (letter,) = dead
    assert letter.key is not None
    assert key.startswith(letter.key)
    assert headers_of(letter)["dlq.key_truncated"] == str(len(key)).encode()
    assert letter.value == value
