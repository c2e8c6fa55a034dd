"""docs/extending.md's worked examples, run as the page shows them: a rule, an input format,
a sink and a command each do what the page says they do."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from consumer.errors import DecodeError
from consumer.inputs.formats import FORMATS, EventFormat
from consumer.pipeline.records import RecordPath
from consumer.rules.base import DeterministicRule
from consumer.rules.missing_citation import MissingCitation
from consumer.rules.registry import KNOWN_RULES
from consumer.rules.rule_set import RuleSet
from schemas.trace import TraceEvent
from tests.support.pipeline_fakes import ListSink, Rec
from tests.support.verdict_sinks import Sink

PAGE = Path(__file__).resolve().parents[2] / "docs" / "extending.md"
EXAMPLE = re.compile(r"<!-- example: ([\w-]+) -->\n```python\n(.*?)```", re.S)


def example(name: str) -> str:
    """The code of the block marked ``example: name``."""
    found: dict[str, str] = dict(EXAMPLE.findall(PAGE.read_text(encoding="utf-8")))
    assert name in found, f"docs/extending.md has no example {name!r}"
    return found[name]


@pytest.fixture
def module() -> Iterator[Any]:
    """Runs an example as a module of its own (importable by name while the test runs)."""
    made: list[str] = []

    def load(name: str) -> ModuleType:
        module_name = f"extending_example_{name.replace('-', '_')}"
        loaded = ModuleType(module_name)
        sys.modules[module_name] = loaded  # dataclasses and the decoder's path look it up
        made.append(module_name)
        exec(compile(example(name), f"docs/extending.md:{name}", "exec"), loaded.__dict__)  # noqa: S102
        return loaded

    yield load
    for name in made:
        del sys.modules[name]


def trace(output: str) -> TraceEvent:
    return TraceEvent(trace_id="t-1", input="q", output=output)


def test_the_rule_example_is_a_deterministic_rule_that_passes_and_fails(module: Any) -> None:
    rules = module("rule")
    rule = rules.AnswerLength()
    assert isinstance(rule, DeterministicRule)
    assert rule.name not in KNOWN_RULES, "the example names a rule the worker does not have"
    short, long = trace("Paris."), trace("x" * (rules.MAX_ANSWER_CHARS + 1))
    assert rule.applies(short, None)
    assert not rule.applies(TraceEvent(trace_id="t-2", input="q", output=""), None)
    assert (rule.check(short, None).verdict, rule.check(short, None).reason) == (
        "pass", "the answer has 6 characters")
    assert rule.check(long, None).verdict == "fail"


async def test_the_format_example_feeds_the_record_path(module: Any) -> None:
    module("format")
    fmt = EventFormat("flat_json", in_files=False,  # type: ignore[arg-type]  # not in FormatName
                      decode="extending_example_format:decode_flat")
    assert fmt.name not in FORMATS
    sink = ListSink()
    path = RecordPath(sink, RuleSet([MissingCitation()], ()), fmt.decoder())
    good = {"id": "flat-1", "question": "Capital of France?", "answer": "Paris [1].",
            "sources": ["Paris is the capital of France."]}
    for offset, value in enumerate([json.dumps(good).encode(), b'{"id": "flat-2"}', None]):
        await path.handle(Rec("flat", 0, offset, 0, None, value, []))
    assert [(v.trace_id, v.rule, v.verdict) for v in sink.verdicts] == [
        ("flat-1", "missing_citation", "pass")]
    assert sink.dead == [(1, "not a flat_json trace: KeyError"),
                         (2, "not a flat_json trace: JSONDecodeError")]
    with pytest.raises(DecodeError):
        fmt.decoder()(b"[]")


async def test_the_sink_example_copies_what_the_broker_acknowledged(
    module: Any, tmp_path: Path,
) -> None:
    sinks = module("sink")
    sink = ListSink()  # a real verdict, from a real rule
    await RecordPath(sink, RuleSet([MissingCitation()], ())).handle(
        Rec("t", 0, 0, 0, None, json.dumps({"trace_id": "t-1", "output": "An answer.",
                                            "retrieved_documents": ["A document."]}).encode(),
            []))
    (verdict,) = sink.verdicts
    copy = tmp_path / "verdicts.jsonl"
    inner = Sink()
    await sinks.JsonLinesCopy(inner, copy).publish(verdict)
    assert inner.published == [verdict]
    assert [json.loads(line) for line in copy.read_text().splitlines()] == [
        json.loads(verdict.model_dump_json())]
    refused = Sink(refuse=True)
    with pytest.raises(Exception, match="not acknowledged"):
        await sinks.JsonLinesCopy(refused, tmp_path / "none.jsonl").publish(verdict)
    assert not (tmp_path / "none.jsonl").exists(), "nothing copied that was not acknowledged"


def test_the_command_example_lists_the_known_rules(capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, Any] = {"argparse": argparse}
    exec(compile(example("command"), "docs/extending.md:command", "exec"), namespace)  # noqa: S102
    commands = argparse.ArgumentParser(prog="groundedness").add_subparsers()
    exec(compile(example("command-parser"), "docs/extending.md:command-parser", "exec"),  # noqa: S102
         namespace | {"commands": commands})
    parser = commands._name_parser_map["rules"]
    args = parser.parse_args([])
    assert args.command(args) == 0
    assert capsys.readouterr().out.splitlines() == list(KNOWN_RULES)
