"""The cost controls through the real worker (``groundedness run``), a real broker and the fake
judge over HTTP: ``SAMPLE_RATE`` judges exactly the traces ``consumer.cost.sampling`` keeps
while the deterministic rules still see every trace, and a restart decides the same;
``TRACE_FILTER`` keeps only matching traces, on ``trace_json`` events and on OTel SDK spans
(whose environment and service come from the resource); ``JUDGE_CACHE_SIZE`` answers a
repeated answer without calling the judge or spending tokens; prices put a cost on every
verdict, in ``/metrics`` and in a replay's summary, which its dry run predicts.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from consumer.cli import main
from consumer.cost.pricing import cost_usd
from consumer.cost.sampling import sampled
from consumer.localjudge.server import JudgeServer
from schemas.verdict import Usage
from tests.support.fake_judge import PROBE, ScriptedJudge
from tests.support.otel_spans import Recorder, otlp_proto, rag_trace
from tests.support.ports import free_port
from tests.support.streams import Topics, create_topics, produce, read_all, trace
from tests.support.workers import (
    VerdictCollector,
    WorkerPool,
    tracebacks,
    wait_committed,
    worker_env,
)

pytestmark = pytest.mark.integration

PARTITIONS = 3
DOCS = [{"id": "kb-1", "content": "Refunds are prorated to the day of cancellation."}]
INPUT_PRICE, OUTPUT_PRICE = 0.15, 0.60  # gpt-4o-mini-like, USD per million tokens
PRICES = {"JUDGE_PRICE_INPUT_PER_MILLION": str(INPUT_PRICE),
          "JUDGE_PRICE_OUTPUT_PER_MILLION": str(OUTPUT_PRICE)}


def cited(trace_id: str, text: str | None = None, **fields: Any) -> bytes:
    """A trace with a document and an answer that cites it: one verdict of each rule."""
    return trace(trace_id, text or f"Prorated to the day [1]. ({trace_id})",
                 retrieved_documents=DOCS, **fields)


async def scrape(http: httpx2.AsyncClient, port: int) -> dict[str, dict[tuple[str, ...], float]]:
    """``/metrics``: samples by name, then by their label values, in the order of the labels'
    names (as the exposition writes them): ``("sampled_out", "groundedness")``."""
    text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    found: dict[str, dict[tuple[str, ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sample.labels.values())] = sample.value
    return found


def judged_ids(verdicts: list[dict[str, Any]], rule: str = "groundedness") -> list[str]:
    return [v["trace_id"] for v in verdicts if v["rule"] == rule]


def scoring_calls(judge: ScriptedJudge) -> list[str]:
    """The answers the judge was asked to score (health probes left out)."""
    return [call.answer for call in judge.calls if call.answer != PROBE]


# -- SAMPLE_RATE ------------------------------------------------------------------------------


async def test_a_sampled_stream_judges_exactly_the_kept_ids_and_a_restart_decides_the_same(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    http: httpx2.AsyncClient,
) -> None:
    judge, server = fake_judge
    topics = Topics.fresh("sampled")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    ids = [f"sampled-{n:04d}" for n in range(300)]
    await produce(kafka, topics.traces, [cited(trace_id) for trace_id in ids])
    kept = {trace_id for trace_id in ids if sampled(trace_id, 0.3)}
    port = free_port()
    env = worker_env(topics.env(kafka), server.url, SAMPLE_RATE="0.3",
                     RULES="groundedness,missing_citation", HEALTH_PORT=str(port))

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        first = await pool.start(env)
        assert await out.wait_for_count(len(ids) + len(kept), timeout_s=90), first.log()
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 30)
        metrics = await scrape(http, port)
        assert await first.terminate() == 0
        published = list(out.verdicts)
        calls = scoring_calls(judge)

        # Another group on the same topic: every trace is decided again, by another process.
        again = await pool.start({**env, "CONSUMER_GROUP": f"{topics.group}-again"},
                                 name="again")
        assert await out.wait_for_count(2 * len(published), timeout_s=90), again.log()
        await asyncio.sleep(1.0)  # a verdict beyond the first run's, if any, has time to come
        assert await again.terminate() == 0

    assert set(judged_ids(published)) == kept
    assert len(judged_ids(published)) == len(kept), "one groundedness verdict per kept trace"
    assert Counter(judged_ids(published, "missing_citation")) == dict.fromkeys(ids, 1), \
        "the deterministic rule on every trace, sampled or not"
    assert sorted(calls) == sorted(f"Prorated to the day [1]. ({t})" for t in kept)
    assert committed == ends, "a sampled-out trace is done once its other verdicts are out"
    skipped = metrics["groundedness_skipped_total"]
    assert skipped[("sampled_out", "groundedness")] == len(ids) - len(kept)
    assert skipped[("sampled_out", "missing_citation")] == 0, "SAMPLE_RATE is the judge's"
    assert skipped[("filtered", "groundedness")] == 0
    assert metrics["groundedness_verdicts_total"][("", "groundedness", "pass")] == len(kept)
    second = out.verdicts[len(published):]
    assert sorted((v["verdict_id"], v["rule"]) for v in second) == sorted(
        (v["verdict_id"], v["rule"]) for v in published), "the same decisions, the same ids"
    rate = len(kept) / len(ids)
    print(f"\nSAMPLE_RATE=0.3: {len(kept)} of {len(ids)} traces judged ({rate:.3f})")
    assert not tracebacks(first.log() + again.log())


# -- <RULE>_SAMPLE_RATE and <RULE>_FILTER -----------------------------------------------------

PER_RULE_TRACES = 2_000  # issue 29's measure: each rule 540-660 verdicts at 0.3


async def test_each_rule_samples_its_own_traces_the_same_on_every_run(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    http: httpx2.AsyncClient,
) -> None:
    """Two rules at 0.3: each keeps about 600 of 2,000, the ids its salted hash keeps, not the
    same ones; a second group decides the same; the skips are counted per rule."""
    _, server = fake_judge
    topics = Topics.fresh("per-rule")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    ids = [f"{n:032x}" for n in range(7**20, 7**20 + PER_RULE_TRACES)]  # OTel-shaped
    await produce(kafka, topics.traces, [cited(trace_id) for trace_id in ids])
    kept = {rule: {t for t in ids if sampled(t, 0.3, salt)} for rule, salt in (
        ("groundedness", ""), ("missing_citation", "missing_citation"))}
    port = free_port()
    env = worker_env(topics.env(kafka), server.url, RULES="groundedness,missing_citation",
                     GROUNDEDNESS_SAMPLE_RATE="0.3", MISSING_CITATION_SAMPLE_RATE="0.3",
                     HEALTH_PORT=str(port))
    wanted = sum(len(chosen) for chosen in kept.values())

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        first = await pool.start(env)
        assert await out.wait_for_count(wanted, timeout_s=120), first.log()
        await wait_committed(kafka, topics.group, topics.traces, 60)
        metrics = await scrape(http, port)
        assert await first.terminate() == 0
        published = list(out.verdicts)
        again = await pool.start({**env, "CONSUMER_GROUP": f"{topics.group}-again"},
                                 name="again")
        assert await out.wait_for_count(2 * wanted, timeout_s=120), again.log()
        await asyncio.sleep(1.0)  # a verdict beyond the first run's, if any, has time to come
        assert await again.terminate() == 0

    second = out.verdicts[len(published):]
    for rule, chosen in kept.items():
        assert sorted(judged_ids(published, rule)) == sorted(chosen)
        assert sorted(judged_ids(second, rule)) == sorted(chosen), "the same on a second run"
        assert 540 <= len(chosen) <= 660
        assert metrics["groundedness_skipped_total"][("sampled_out", rule)] == len(ids) - len(
            chosen)
    both = kept["groundedness"] & kept["missing_citation"]
    assert kept["groundedness"] != kept["missing_citation"]
    print(f"\n{PER_RULE_TRACES} traces at 0.3 each: groundedness {len(kept['groundedness'])}, "
          f"missing_citation {len(kept['missing_citation'])}, both {len(both)} "
          f"(independent: about {0.09 * PER_RULE_TRACES:.0f})")
    assert not tracebacks(first.log() + again.log())


async def test_a_rules_filter_chooses_its_traces_and_leaves_the_others_rules_alone(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    http: httpx2.AsyncClient,
) -> None:
    """``MISSING_CITATION_FILTER`` beside ``TRACE_FILTER``: missing_citation sees checkout's
    traces, groundedness TRACE_FILTER's production ones."""
    judge, server = fake_judge
    topics = Topics.fresh("rule-filter")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    await produce(kafka, topics.traces, filtered_stream())
    port = free_port()
    env = worker_env(topics.env(kafka), server.url, RULES="groundedness,missing_citation",
                     TRACE_FILTER="metadata.environment == 'production'",
                     MISSING_CITATION_FILTER="project_id == 'checkout'", HEALTH_PORT=str(port))
    production = {t for t, (environment, _) in TRACES.items() if environment == "production"}
    checkout = {t for t, (_, project) in TRACES.items() if project == "checkout"}

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        worker = await pool.start(env)
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 90)
        assert await out.wait_for_count(len(production) + len(checkout), timeout_s=30), \
            worker.log()
        await asyncio.sleep(1.0)  # a verdict for a filtered trace, if any, has time to arrive
        metrics = await scrape(http, port)
        assert await worker.terminate() == 0

    assert committed == ends
    assert Counter((v["trace_id"], v["rule"]) for v in out.verdicts) == {
        **{(t, "groundedness"): 1 for t in production},
        **{(t, "missing_citation"): 1 for t in checkout}}
    assert len(scoring_calls(judge)) == len(production)
    by_project = metrics["groundedness_verdicts_total"]  # the traces' project_id, as labelled
    for project in ("checkout", "search"):
        assert by_project[(project, "groundedness", "pass")] == len(
            {t for t in production if TRACES[t][1] == project})
    assert by_project[("checkout", "missing_citation", "pass")] == len(checkout)
    assert by_project.get(("search", "missing_citation", "pass"), 0) == 0
    skipped = metrics["groundedness_skipped_total"]
    assert skipped[("filtered", "groundedness")] == len(TRACES) - len(production)
    assert skipped[("filtered", "missing_citation")] == len(TRACES) - len(checkout)
    assert not tracebacks(worker.log())


# -- TRACE_FILTER -----------------------------------------------------------------------------

# trace id -> (environment, project); the filters select by one or the other.
TRACES = {f"filtered-{n:03d}": (("production", "staging", None)[n % 3],
                                ("checkout", "search")[n % 2]) for n in range(60)}


def filtered_stream() -> list[bytes]:
    values = []
    for trace_id, (environment, project) in TRACES.items():
        metadata = {"environment": environment} if environment else {"team": "support"}
        values.append(cited(trace_id, project_id=project, metadata=metadata))
    return values


@pytest.mark.parametrize(
    ("expression", "wanted"),
    [
        pytest.param("metadata.environment == 'production'",
                     {t for t, (env, _) in TRACES.items() if env == "production"},
                     id="environment"),
        pytest.param("project_id == 'checkout'",
                     {t for t, (_, project) in TRACES.items() if project == "checkout"},
                     id="project"),
    ],
)
async def test_a_filtered_stream_gets_verdicts_only_for_matching_traces(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    http: httpx2.AsyncClient, expression: str, wanted: set[str],
) -> None:
    judge, server = fake_judge
    topics = Topics.fresh("filtered")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    await produce(kafka, topics.traces, filtered_stream())
    port = free_port()
    env = worker_env(topics.env(kafka), server.url, TRACE_FILTER=expression,
                     RULES="groundedness,missing_citation", HEALTH_PORT=str(port))

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        worker = await pool.start(env)
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 90)
        assert await out.wait_for_count(2 * len(wanted), timeout_s=30), worker.log()
        await asyncio.sleep(1.0)  # a verdict for a filtered trace, if any, has time to arrive
        metrics = await scrape(http, port)
        assert await worker.terminate() == 0

    assert committed == ends, "filtered traces are done, their offsets committed"
    assert Counter((v["trace_id"], v["rule"]) for v in out.verdicts) == {
        (t, rule): 1 for t in wanted for rule in ("groundedness", "missing_citation")}
    assert len(scoring_calls(judge)) == len(wanted)
    for rule in ("groundedness", "missing_citation"):  # TRACE_FILTER is every rule's
        assert metrics["groundedness_skipped_total"][("filtered", rule)] == len(TRACES) - len(
            wanted)
        assert metrics["groundedness_skipped_total"][("sampled_out", rule)] == 0
    assert not tracebacks(worker.log())


async def test_a_span_filter_reads_the_resources_environment_and_service(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    http: httpx2.AsyncClient,
) -> None:
    """From spans, ``metadata.environment`` is the resource's ``deployment.environment.name``
    and ``service`` its ``service.name``: one expression for both formats."""
    _, server = fake_judge
    topics = Topics.fresh("filtered-spans")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    resources = [("support-bot", "production"), ("support-bot", "staging"),
                 ("checkout", "production"), ("support-bot", None)]
    values: list[bytes | None] = []
    keys: list[bytes | None] = []
    wanted: set[str] = set()
    for n in range(12):
        service, environment = resources[n % len(resources)]
        extra = {"deployment.environment.name": environment} if environment else {}
        recorder = Recorder(service, **extra)
        rag_trace(recorder.tracer, f"Question {n}?")
        spans = recorder.spans()
        context = spans[0].context
        assert context is not None
        trace_id = f"{context.trace_id:032x}"
        values.append(otlp_proto(spans))
        keys.append(trace_id.encode())  # as partition_traces_by_id keys them
        if (service, environment) == ("support-bot", "production"):
            wanted.add(trace_id)
    await produce(kafka, topics.traces, values, keys=keys)
    port = free_port()
    env = worker_env(topics.env(kafka), server.url, TRACES_FORMAT="otlp_proto",
                     TRACE_QUIET_SECONDS="0.3", TRACE_MAX_WAIT_SECONDS="30",
                     TRACE_FILTER="metadata.environment == 'production' && "
                                  "service == 'support-bot'",
                     HEALTH_PORT=str(port))

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        worker = await pool.start(env)
        committed, ends = await wait_committed(kafka, topics.group, topics.traces, 90)
        assert await out.wait_for(wanted, timeout_s=30), worker.log()
        await asyncio.sleep(1.0)
        metrics = await scrape(http, port)
        assert await worker.terminate() == 0

    assert committed == ends
    assert sorted(v["trace_id"] for v in out.verdicts) == sorted(wanted)
    assert metrics["groundedness_skipped_total"][("filtered", "groundedness")] == 12 - len(wanted)
    assert not tracebacks(worker.log())


# -- JUDGE_CACHE_SIZE and prices --------------------------------------------------------------


def repeated_stream(count: int = 100, repeated_share: float = 0.3
                    ) -> tuple[list[bytes], list[str], int]:
    """``count`` traces of which ``repeated_share`` repeat an earlier trace's answer (the
    same question, documents and answer, another trace id): (values, answers, distinct)."""
    distinct = round(count * (1 - repeated_share))
    answers = [f"Prorated to the day [1]. (answer {n % distinct})" for n in range(count)]
    values = [cited(f"repeat-{n:04d}", text, input="Are refunds prorated?")
              for n, text in enumerate(answers)]
    return values, answers, distinct


async def test_repeated_answers_are_judged_once_and_cost_nothing_the_second_time(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
    http: httpx2.AsyncClient,
) -> None:
    judge, server = fake_judge
    topics = Topics.fresh("cached")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    values, answers, distinct = repeated_stream()
    await produce(kafka, topics.traces, values)
    port = free_port()
    env = worker_env(topics.env(kafka), server.url, JUDGE_CACHE_SIZE="1000",
                     HEALTH_PORT=str(port), **PRICES)

    async with WorkerPool(tmp_path) as pool, VerdictCollector(kafka, topics.verdicts) as out:
        worker = await pool.start(env)
        assert await out.wait_for_count(len(values), timeout_s=90), worker.log()
        await wait_committed(kafka, topics.group, topics.traces, 30)
        metrics = await scrape(http, port)
        assert await worker.terminate() == 0

    verdicts = out.verdicts
    hits = [v for v in verdicts if v.get("cached")]
    paid = [v for v in verdicts if not v.get("cached")]
    assert len(verdicts) == len(values)
    assert Counter(scoring_calls(judge)) == dict.fromkeys(set(answers), 1), \
        "the judge is called once per distinct answer"
    assert len(hits) == len(values) - distinct
    assert metrics["groundedness_judge_cache_hits_total"][()] == len(hits)
    # A hit: its own verdict id, the verdict the first answer gave, no tokens, no cost.
    assert len({v["verdict_id"] for v in verdicts}) == len(verdicts)
    assert all(v["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
               and v["cost_usd"] == 0 and v["latency_ms"] == 0 for v in hits)
    assert all(v["cost_usd"] == pytest.approx(
        cost_usd(Usage(**v["usage"]), INPUT_PRICE, OUTPUT_PRICE), rel=1e-9) and v["cost_usd"] > 0
        for v in paid)
    assert "cached" not in paid[0], "left out of the JSON when false"
    spent = sum(v["cost_usd"] for v in verdicts)
    assert metrics["groundedness_judge_cost_usd_total"][("",)] == pytest.approx(spent, rel=1e-9)
    tokens = metrics["groundedness_judge_tokens_total"]
    assert tokens[("prompt",)] == sum(v["usage"]["prompt_tokens"] for v in paid)
    print(f"\ncache: {len(hits)} hits of {len(verdicts)} verdicts "
          f"({len(hits) / len(verdicts):.0%} hit rate) on a stream with "
          f"{len(values) - distinct} repeated answers; ${spent:.6f} for {len(paid)} judge calls")
    assert not tracebacks(worker.log())


# -- a replay: its summary, and the dry run that predicts it ----------------------------------


async def replay(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """Run `groundedness replay ARGS` (the real command, in a thread: it runs its own loop)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return await asyncio.wait_for(asyncio.to_thread(main, ["replay", *args]), timeout=120)


async def test_a_replays_summary_adds_up_its_verdicts_costs_as_its_dry_run_predicted(
    kafka: str, fake_judge: tuple[ScriptedJudge, JudgeServer], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    judge, server = fake_judge
    topics = Topics.fresh("replay-cost")
    await create_topics(kafka, topics, partitions=PARTITIONS)
    values, _, _ = repeated_stream(60)
    values += [cited(f"staging-{n}", metadata={"environment": "staging"}) for n in range(6)]
    values += [trace("empty", "  ")]
    start_ms = int(time.time() * 1000) - 60_000
    producer = AIOKafkaProducer(bootstrap_servers=kafka, enable_idempotence=True)
    await producer.start()
    try:
        for n, value in enumerate(values):
            await producer.send(topics.traces, value, partition=n % PARTITIONS,
                                timestamp_ms=start_ms + n)
        await producer.flush()
    finally:
        await producer.stop()
    env = worker_env(topics.env(kafka), server.url, JUDGE_CACHE_SIZE="1000", SAMPLE_RATE="0.8",
                     TRACE_FILTER="metadata.environment != 'staging'",
                     RULES="groundedness,missing_citation", **PRICES)
    since = datetime.fromtimestamp((start_ms - 1000) / 1000, UTC).isoformat()
    dry_path, real_path = tmp_path / "dry.json", tmp_path / "real.json"

    assert await replay(env, monkeypatch, "--from", since, "--dry-run",
                        "--summary-json", str(dry_path)) == 0
    assert scoring_calls(judge) == []
    assert await replay(env, monkeypatch, "--from", since,
                        "--summary-json", str(real_path)) == 0

    dry, real = (json.loads(path.read_text()) for path in (dry_path, real_path))
    records = await read_all(kafka, topics.verdicts, at_least=1, settle_s=1.0)
    verdicts = [json.loads(r.value or b"{}") for r in records]
    judged = [v for v in verdicts if v["rule"] == "groundedness"]
    left_out = ("skipped", "filtered", "sampled_out", "not_applicable")
    assert {k: dry[k] for k in left_out} == {k: real[k] for k in left_out}
    assert (real["filtered"], real["skipped"]) == (2 * 6, 1), "filtered: verdicts, per rule"
    assert real["sampled_out"] > 0
    assert dry["would_judge"] == len(judged) == sum(real["rules"]["groundedness"].values())
    assert dry["rules"]["missing_citation"] == real["rules"]["missing_citation"]
    assert dry["cache_hits"] == real["cache_hits"] == sum(bool(v.get("cached")) for v in judged)
    assert real["cost_usd"] == pytest.approx(sum(v["cost_usd"] for v in judged), rel=1e-9)
    assert real["tokens"]["total"] == sum(v["usage"]["total_tokens"] for v in judged)
    assert len(scoring_calls(judge)) == len(judged) - real["cache_hits"]
    assert dry["prices"] == {"input_per_million": INPUT_PRICE,
                             "output_per_million": OUTPUT_PRICE, "from": "JUDGE_PRICE_*"}
    print(f"\nreplay: {len(judged)} judged ({real['cache_hits']} from the cache), "
          f"{real['tokens']['total']:,} tokens, ${real['cost_usd']:.6f}; dry run estimate "
          f"{dry['estimated_tokens']:,} tokens, ${dry['estimated_cost_usd']:.6f}")
