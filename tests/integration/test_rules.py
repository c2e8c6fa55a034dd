"""``RULES=groundedness,missing_citation,answered_without_tool`` through the real worker, a real
broker and the fake judge over HTTP, on ``trace_json`` events and on OTel SDK spans: one
verdict per trace and applicable rule (none for an empty answer), a trace's offset committed
only once all of its verdicts are out, a restart that republishes nothing, the verdicts
counted per rule on ``/metrics``, and a worker without a judge key when no rule needs one.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from consumer.localjudge.server import JudgeServer
from tests.support.fake_judge import ScriptedJudge
from tests.support.http import wait_status
from tests.support.ports import free_port
from tests.support.rule_traces import (
    ALL_RULES,
    CITATION,
    DETERMINISTIC,
    DUNE,
    GROUNDEDNESS,
    RULES,
    TOOLS,
    RuleCase,
    end_offset,
    json_cases,
    mismatches,
    records_of,
    span_cases,
)
from tests.support.streams import (
    Topics,
    create_topics,
    group_offsets,
    in_process_worker,
    produce,
    read_all,
    trace,
)
from tests.support.workers import (
    VerdictCollector,
    WorkerPool,
    tracebacks,
    wait_committed,
    worker_env,
)

pytestmark = pytest.mark.integration

PARTITIONS = 3


def expected_count(cases: list[RuleCase], rules: tuple[str, ...] = RULES) -> int:
    return sum(rule in rules for case in cases for rule in case.expected)


def expected_by_rule(cases: list[RuleCase],
                     rules: tuple[str, ...] = RULES) -> Counter[tuple[str, str]]:
    return Counter((rule, verdict) for case in cases for rule, verdict in case.expected.items()
                   if rule in rules)


def only(cases: list[RuleCase], rules: tuple[str, ...]) -> list[RuleCase]:
    """The cases as a worker running ``rules`` alone must judge them."""
    return [RuleCase(c.name, c.trace_id, c.records,
                     {r: v for r, v in c.expected.items() if r in rules},
                     {r: t for r, t in c.reason_has.items() if r in rules}) for c in cases]


async def verdict_metrics(http: httpx2.AsyncClient, url: str) -> Counter[tuple[str, str]]:
    """``groundedness_verdicts_total`` by (rule, verdict), as ``/metrics`` shows it."""
    text = (await http.get(url)).text
    counted: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "groundedness_verdicts_total":  # summed over the projects
                counted[s.labels["rule"], s.labels["verdict"]] += int(s.value)
    return counted


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
async def test_one_verdict_per_trace_and_applicable_rule_and_a_restart_republishes_nothing(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    http: httpx2.AsyncClient, delivery: str,
) -> None:
    judge, server = fake_judge
    topics = Topics.fresh(f"rules-{delivery}")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    cases = json_cases()
    values, _ = records_of(cases, keyed=False)
    await produce(kafka, topics.traces, values)
    port = free_port()
    env = worker_env(topics.env(kafka), server.url, RULES=ALL_RULES, DELIVERY=delivery,
                     HEALTH_PORT=str(port))
    want = expected_count(cases)

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        first = await pool.start(env)
        assert await out.wait_for_count(want, timeout_s=60), first.log()
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 30)
        counted = await verdict_metrics(http, f"http://127.0.0.1:{port}/metrics")
        assert await first.terminate() == 0
        published = list(out.verdicts)
        calls = judge.count()

        # The restart, and one more trace on every partition: once each has its verdicts the
        # new worker has read past everything the first one committed.
        second = await pool.start(env, name="after-restart")
        sentinels = [f"after-restart-{p}" for p in range(PARTITIONS)]
        # Each answer its own text: identical ones would share one judge call (the cache).
        await produce(kafka, topics.traces, [
            trace(t, f"Dune is by Frank Herbert [1]. ({t})", retrieved_documents=[DUNE])
            for t in sentinels])
        assert await out.wait_for(set(sentinels), timeout_s=60), second.log()
        await asyncio.sleep(1.0)  # a republished verdict, if any, has time to arrive
        assert await second.terminate() == 0

    assert mismatches(published, cases) == []
    assert len(published) == want
    assert committed == ends, "every record committed once its verdicts were out"
    assert counted == expected_by_rule(cases), "groundedness_verdicts_total{rule,verdict}"
    again = [v for v in out.verdicts[len(published):] if v["trace_id"] not in sentinels]
    assert again == [], "the restart republished verdicts"
    assert Counter(v["trace_id"] for v in out.verdicts[len(published):]) == dict.fromkeys(
        sentinels, 2), "groundedness and missing_citation for each new trace, once"
    assert judge.count() - calls == len(sentinels), "the restart judged nothing again"
    assert not tracebacks(first.log() + second.log())


async def test_a_record_is_committed_only_once_every_verdict_of_its_trace_is_out(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One partition: [done, HELD, after, after]. The judge holds HELD's groundedness answer
    while the deterministic rules and the later traces finish: the watermark stays at HELD."""
    _, server = fake_judge
    topics = Topics.fresh("rules-held")
    await create_topics(kafka, topics, partitions=1)
    tools = {"tools_available": ["lookup_order"],
             "tool_calls": [{"name": "lookup_order", "result": "shipped"}]}
    values = [
        trace("done", "Frank Herbert [1].", retrieved_documents=[DUNE], **tools),
        trace("held", "Frank Herbert [1]. [[delay=6]]", retrieved_documents=[DUNE], **tools),
        trace("after-1", "Frank Herbert [1].", retrieved_documents=[DUNE], **tools),
        trace("after-2", "Frank Herbert [1].", retrieved_documents=[DUNE], **tools),
    ]
    held_offset, end = 1, len(values)
    await produce(kafka, topics.traces, values)
    env = worker_env(topics.env(kafka), server.url, RULES=ALL_RULES, JUDGE_TIMEOUT_SECONDS="30")

    samples: list[tuple[int, bool, bool]] = []  # (committed, held judged, the rest all out)
    async with VerdictCollector(kafka, topics.verdicts) as out, \
            in_process_worker(env, monkeypatch):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            committed = (await group_offsets(kafka, topics.group, topics.traces))[0][0]
            # Everything published before the commit was read: is HELD's groundedness out?
            assert await out.wait_for_count(await end_offset(kafka, topics.verdicts), 10)
            rules = {(v["trace_id"], v["rule"]) for v in out.verdicts}
            rest = all((t, r) in rules for t in ("done", "after-1", "after-2") for r in RULES)
            samples.append((committed, ("held", GROUNDEDNESS) in rules, rest))
            if committed == end:
                break
            await asyncio.sleep(0.2)

    while_held = [(committed, rest) for committed, judged, rest in samples if not judged]
    print(f"\nheld trace: {len(while_held)} samples before its groundedness verdict, "
          f"committed offsets {sorted({c for c, _ in while_held})}")
    assert all(committed <= held_offset for committed, _ in while_held), samples
    assert (held_offset, True) in while_held, f"the held state was never seen: {samples}"
    assert samples[-1][0] == end, "committed to the end once HELD's verdicts were out"
    assert Counter((v["trace_id"], v["rule"]) for v in out.verdicts) == {
        (t, r): 1 for t in ("done", "held", "after-1", "after-2") for r in RULES}


async def test_spans_reach_the_rules_with_their_tools_documents_and_agents(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, server = fake_judge
    topics = Topics.fresh("rules-spans")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    cases = span_cases()
    values, keys = records_of(cases, keyed=True)
    await produce(kafka, topics.traces, values, keys=keys)
    env = worker_env(topics.env(kafka), server.url, RULES=ALL_RULES, TRACES_FORMAT="otlp_proto",
                     TRACE_QUIET_SECONDS="0.3", TRACE_MAX_WAIT_SECONDS="30")
    want = expected_count(cases)

    async with in_process_worker(env, monkeypatch):
        records = await read_all(kafka, topics.verdicts, at_least=want, timeout_s=60,
                                 settle_s=1.0)
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 30)

    verdicts = [json.loads(r.value or b"{}") for r in records]
    for v in verdicts:
        print(f"\n{v['rule']:22} {v['verdict']:4} {v['trace_id'][:8]} {v['reason']}", end="")
    assert mismatches(verdicts, cases) == []
    names = {case.trace_id: case.name for case in cases}
    span_fields = {(names[v["trace_id"]], v["rule"]): (v["span_id"] is not None,
                                                      v["assembly"]["root_seen"])
                   for v in verdicts}
    assert set(span_fields.values()) == {(True, True)}, "every verdict names its answer span"
    assert committed == ends


async def test_without_groundedness_the_worker_starts_without_a_key_and_never_calls_a_judge(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    http: httpx2.AsyncClient,
) -> None:
    judge, server = fake_judge
    topics = Topics.fresh("rules-keyless")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    rules = DETERMINISTIC
    cases = only(json_cases(), rules)
    values, _ = records_of(cases, keyed=False)
    await produce(kafka, topics.traces, values)
    port = free_port()
    # The judge's URL stays set: any call the worker made would reach the fake judge.
    keyless = {name: value for name, value in worker_env(
        topics.env(kafka), server.url, RULES=",".join(rules), HEALTH_PORT=str(port)).items()
        if name not in {"OPENAI_API_KEY", "MIN_ACCEPTABLE_SCORE"}}

    async with WorkerPool(tmp_path) as pool:
        worker = await pool.start(keyless)
        await wait_status(http, f"http://127.0.0.1:{port}/readyz", 200, timeout_s=60)
        records = await read_all(kafka, topics.verdicts, at_least=expected_count(cases, rules),
                                 timeout_s=60)
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 30)
        counted = await verdict_metrics(http, f"http://127.0.0.1:{port}/metrics")
        assert await worker.terminate() == 0
        verdicts = [json.loads(r.value or b"{}") for r in records]

        # groundedness listed without a key: refused at start with one line, nothing consumed.
        refused_env = keyless | {"RULES": f"{CITATION},{GROUNDEDNESS},{TOOLS}",
                                 "MIN_ACCEPTABLE_SCORE": "0.5", "CONSUMER_GROUP": "refused-"
                                 + topics.group}
        refused = await pool.start(refused_env, name="refused")
        code = await asyncio.wait_for(refused.process.wait(), 30)

    assert mismatches(verdicts, cases) == []
    assert {v["rule"] for v in verdicts} == set(rules)
    assert committed == ends
    assert judge.count() == 0, "no judge call, not even a probe"
    for rule in rules:
        for verdict in ("pass", "fail"):
            assert counted[rule, verdict] == expected_by_rule(cases, rules)[rule, verdict]
    assert not tracebacks(worker.log())
    lines = refused.log().strip().splitlines()
    assert (code, len(lines)) == (2, 1), refused.log()
    assert "OPENAI_API_KEY" in lines[0]
    assert (await group_offsets(kafka, "refused-" + topics.group, topics.traces))[0] == {
        p: 0 for p in range(PARTITIONS)}, "the refused worker consumed nothing"
