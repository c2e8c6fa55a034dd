"""What the offline commands' tests share: the worker's settings pointed at the fake judge."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from consumer.localjudge.server import JudgeServer
from tests.support.fake_judge import ScriptedJudge
from tests.support.workers import worker_env

Judge = tuple[ScriptedJudge, JudgeServer]


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, fake_judge: Judge) -> Judge:
    """The fake judge, with the worker's settings pointing at it in the environment."""
    _, server = fake_judge
    env = worker_env({}, server.url, JUDGE_MAX_CONCURRENCY="4", JUDGE_TIMEOUT_SECONDS="5")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return fake_judge


def verdict_lines(out: str) -> list[dict[str, Any]]:
    """The verdicts a command printed, one JSON object per line."""
    return [json.loads(line) for line in out.splitlines()]


SUMMARY_LINE = re.compile(r"check: (\w+: \d+ pass, \d+ fail, \d+ error(, not applicable .*)?"
                          r"|left out: .*|judge: \d+ verdicts, .*)")


def notes(err: str) -> list[str]:
    """What ``check`` wrote on stderr before its closing summary (a line per rule, what was
    left out, the judge's cost: the tests of the summary read it themselves)."""
    lines = err.splitlines()
    while lines and SUMMARY_LINE.fullmatch(lines[-1]):
        lines.pop()
    return lines
