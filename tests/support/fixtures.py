"""Pytest fixtures for the fake judge (imported into ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from consumer.localjudge.server import JudgeServer
from tests.support.fake_judge import ScriptedJudge


@pytest.fixture
def fake_judge() -> Iterator[tuple[ScriptedJudge, JudgeServer]]:
    """A fresh ``ScriptedJudge`` served on 127.0.0.1 (free port); use ``server.url``."""
    judge = ScriptedJudge()
    with JudgeServer(judge, models=("scripted-judge", "gpt-4o-mini")) as server:
        yield judge, server
