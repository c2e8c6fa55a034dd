"""The composition root: what it builds from settings, and that every command goes through it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from consumer import wiring
from consumer.errors import ConfigError
from consumer.kafka import clients
from consumer.pipeline.delivery.sink import KafkaVerdictSink
from consumer.pipeline.delivery.transactional import TransactionalSink
from consumer.pipeline.progress import Commitment
from consumer.settings import Settings, load_settings
from schemas.trace import TraceEvent

CONSUMER = Path(__file__).resolve().parents[2] / "consumer"


class Recorded:
    """Stands in for an aiokafka client class: keeps the constructor's arguments."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.commits: list[dict[Any, Any]] = []

    async def commit(self, offsets: dict[Any, Any]) -> None:
        self.commits.append(offsets)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clients, "AIOKafkaProducer", Recorded)
    monkeypatch.setattr(clients, "AIOKafkaConsumer", Recorded)


def test_limits_and_pipeline_config_come_from_the_settings() -> None:
    settings = Settings(max_documents=3, max_document_chars=900, max_output_chars=700,
                        context_field="input", judge_max_concurrency=20,
                        drain_timeout_seconds=12)
    limits = wiring.limits(settings)
    assert (limits.max_documents, limits.max_document_chars, limits.max_output_chars,
            limits.context_field) == (3, 900, 700, "input")
    config = wiring.pipeline_config(settings)
    assert (config.max_in_flight, config.max_uncommitted, config.drain_timeout_s) == (
        80, 640, 12)
    small = wiring.pipeline_config(Settings(judge_max_concurrency=1))
    assert (small.max_in_flight, small.max_uncommitted) == (64, 256)


async def test_the_evaluator_uses_the_same_limits_and_needs_an_api_key() -> None:
    settings = load_settings(openai_api_key="sk-test", min_acceptable_score=0.5,
                             max_documents=2)
    evaluator = wiring.make_evaluator(settings)
    try:
        assert evaluator.limits == wiring.limits(settings)
        assert evaluator.threshold == settings.threshold
    finally:
        await evaluator.judge.close()
    with pytest.raises(ConfigError):
        wiring.make_evaluator(load_settings(openai_api_key=None, min_acceptable_score=0.5))


async def test_the_rules_follow_rules_and_need_a_key_only_with_groundedness() -> None:
    keyless = wiring.make_rules(load_settings(
        openai_api_key=None, rules="answered_without_tool,missing_citation",
        citation_pattern=r"\{\{cite:[^}]+\}\}"))
    assert keyless.names == ("answered_without_tool", "missing_citation")
    assert not keyless.holding
    cited = TraceEvent(trace_id="t", output="Yes {{cite:kb-1}}.",
                       retrieved_documents=[{"id": "kb-1", "content": "Yes."}])
    [found] = (await keyless.evaluate(cited)).evaluations
    assert found.verdict.verdict == "pass", "CITATION_PATTERN reaches the rule"
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        wiring.make_rules(load_settings(openai_api_key=None, min_acceptable_score=0.5,
                                        rules="missing_citation,groundedness"))
    judged = wiring.make_rules(load_settings(openai_api_key="sk-test", min_acceptable_score=0.5,
                                             rules="missing_citation,groundedness"))
    try:
        assert judged.names == ("missing_citation", "groundedness")
    finally:
        await judged.close()


@pytest.mark.usefixtures("recorded")
def test_each_kafka_client_has_its_own_id_and_only_the_worker_joins_the_group() -> None:
    settings = Settings(consumer_group="g", kafka_bootstrap_servers="b:9")
    made = {
        "producer": wiring.create_producer(settings),
        "consumer": wiring.create_consumer(settings),
        "reader": wiring.create_reader(settings),
    }
    options = {name: client.options for name, client in made.items()}
    assert {name: o["client_id"] for name, o in options.items()} == {
        "producer": "g-producer", "consumer": "g-consumer", "reader": "g-replay"}
    assert options["consumer"]["group_id"] == "g"
    assert options["reader"]["group_id"] is None
    for name in ("consumer", "reader"):
        assert options[name]["enable_auto_commit"] is False
        assert options[name]["isolation_level"] == "read_committed"
    assert options["producer"]["enable_idempotence"] is True
    assert options["producer"]["transactional_id"] is None
    assert all(o["bootstrap_servers"] == "b:9" for o in options.values())


@pytest.mark.usefixtures("recorded")
async def test_at_least_once_commits_through_the_consumer() -> None:
    consumer = Recorded()
    delivery = wiring.delivery(Settings(delivery="at_least_once"), consumer)
    assert isinstance(delivery.sink, KafkaVerdictSink)
    assert delivery.producer is not None
    assert delivery.transactions is None
    assert await delivery.commit({"tp": Commitment(7, "g1:x")}) == {"tp": Commitment(7, "g1:x")}
    assert consumer.commits == [{"tp": (7, "g1:x")}], "the progress goes with the offset"


@pytest.mark.usefixtures("recorded")
def test_exactly_once_commits_in_one_transaction_per_partition() -> None:
    consumer = Recorded()
    delivery = wiring.delivery(Settings(delivery="exactly_once"), consumer)
    assert isinstance(delivery.sink, TransactionalSink)
    assert delivery.transactions is delivery.sink
    assert delivery.producer is None
    assert delivery.commit == delivery.sink.commit
    assert consumer.commits == []


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_only_the_command_line_imports_the_worker() -> None:
    importers = sorted(
        str(path.relative_to(CONSUMER)) for path in CONSUMER.rglob("*.py")
        if "consumer.worker" in _imports(path)
    )
    assert importers == ["cli.py"]


def test_only_the_kafka_clients_construct_kafka_clients() -> None:
    """Every client gets its options (security included) and starts in one place."""
    constructors = {"AIOKafkaProducer", "AIOKafkaConsumer", "AIOKafkaAdminClient"}
    builders = set()
    for path in CONSUMER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in constructors):
                builders.add(str(path.relative_to(CONSUMER)))
    assert builders == {"kafka/clients.py"}


def test_only_the_kafka_clients_call_a_kafka_clients_start() -> None:
    """``client.start()`` is called in ``start_once`` alone, so every start (the transactional
    producers' too) tells a refused login from an unreachable broker the same way."""
    callers = set()
    for path in CONSUMER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Await) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Attribute)
                    and node.value.func.attr == "start" and not node.value.args):
                callers.add(str(path.relative_to(CONSUMER)))
    assert callers - {"health/server.py", "localjudge/server.py"} == {"kafka/clients.py"}


async def test_a_long_secret_quoted_by_a_rule_is_redacted_before_the_quote_is_cut() -> None:
    key = "sk-proj-" + "Q7x" * 52  # 164 characters: longer than any quote a reason keeps
    rules = wiring.make_rules(load_settings(
        openai_api_key=key, rules="answered_without_tool,missing_citation"))
    traces = [
        TraceEvent(trace_id="error", output="Sunny.", tools_available=["weather"],
                   tool_calls=[{"name": "weather", "error": f"401: bad key {key}"}]),
        TraceEvent(trace_id="name", output="Sunny.", tools_available=[key]),
        TraceEvent(trace_id="marker", output=f"Sunny (source: {key}).",
                   retrieved_documents=[{"content": "Sunny."}]),
    ]
    for trace in traces:
        for found in (await rules.evaluate(trace)).evaluations:
            reason = found.verdict.reason or ""
            assert key[:12] not in reason, (trace.trace_id, reason)
            assert "[REDACTED]" in reason, (trace.trace_id, reason)
