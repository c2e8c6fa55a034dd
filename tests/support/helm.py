"""The real helm and promtool CLIs, for the chart's tests.

Found where ``make helm promtool`` builds them (``.cache/bin``), else on ``PATH``; helm runs
with its cache, config and data homes in a private directory, so a test never reads or
writes the user's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "groundedness-worker"
RELEASE = "gw"
NAMESPACE = "evals"
FULLNAME = f"{RELEASE}-groundedness-worker"

Values = dict[str, Any]


def find_tool(name: str) -> str | None:
    """The tool ``make`` built into ``.cache/bin``, else the one on ``PATH``."""
    local = REPO / ".cache" / "bin" / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


def private_env(home: Path) -> dict[str, str]:
    """An environment whose helm homes are under ``home``."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }


@dataclass(frozen=True)
class Helm:
    """The helm CLI, run in a private environment."""

    binary: str
    env: dict[str, str]

    def run(self, *args: str, values: Values | None = None) -> subprocess.CompletedProcess[str]:
        """``helm ARGS``; ``values`` given on stdin (``--values -``)."""
        command = [self.binary, *args]
        stdin = None
        if values is not None:
            command += ["--values", "-"]
            stdin = yaml.safe_dump(values)
        return subprocess.run(command, input=stdin, capture_output=True, text=True,
                              env=self.env, timeout=120, check=False)

    def template(self, values: Values, *extra: str) -> subprocess.CompletedProcess[str]:
        """The chart rendered as release ``RELEASE`` in ``NAMESPACE``."""
        return self.run(
            "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *extra, values=values
        )


def iter_strings(node: object) -> Iterator[str]:
    """Every string in a rendered manifest (to search it for what must not be there)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from iter_strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from iter_strings(value)
