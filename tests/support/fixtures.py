"""Pytest fixtures for the fake judge and the real helm (imported into ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from consumer.localjudge.server import JudgeServer
from tests.support.fake_judge import ScriptedJudge
from tests.support.helm import Helm, find_tool, private_env


@pytest.fixture
def fake_judge() -> Iterator[tuple[ScriptedJudge, JudgeServer]]:
    """A fresh ``ScriptedJudge`` served on 127.0.0.1 (free port); use ``server.url``."""
    judge = ScriptedJudge()
    with JudgeServer(judge, models=("scripted-judge", "gpt-4o-mini")) as server:
        yield judge, server


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The real helm (``make helm``) with a private home; the test is skipped without it."""
    binary = find_tool("helm")
    if binary is None:
        pytest.skip("helm is not installed (run scripts/install-helm, or put helm on PATH)")
    return Helm(binary=binary, env=private_env(tmp_path_factory.mktemp("helm-home")))
