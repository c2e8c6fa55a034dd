"""``scripts/install-prometheus`` and ``scripts/install-promtool`` with a binary already in
``.cache/bin``: kept only when it was built from the wanted module version (go reads that from
the binary), rebuilt otherwise; without go, its version cannot be read: kept with a warning,
or refused when ``PROMETHEUS_MODULE_VERSION`` asked for a version.

Each run is in a copy of the scripts with a stand-in binary and, when go is present, a
stand-in ``go`` that reports the binary's module from a file and "builds" by rewriting it:
no module is fetched.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.workers import REPO_ROOT

WANTED = "v0.316.0"  # scripts/install-prometheus-tool's default, for both tools
STALE = "v0.300.0"
MODULE = "github.com/prometheus/prometheus"
FAKE_GO = f"""#!/bin/bash
# go version -m <binary>: its module, from <binary>.module; go install <module>@<v>: rebuilds.
set -e
if [[ "$1" == version ]]; then
    printf '\\tmod\\t{MODULE}\\t%s\\th1:x=\\n' "$(cat "$3.module")"
elif [[ "$1" == install ]]; then
    name="${{2%@*}}"; name="${{name##*/}}"
    echo "${{2##*@}}" > "$GOBIN/$name.module"
    echo "$2" >> "$GOBIN/installs"
fi
"""


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
    installs: list[str]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    for script in ("install-prometheus", "install-promtool", "install-prometheus-tool"):
        shutil.copy2(REPO_ROOT / "scripts" / script, tmp_path / "scripts" / script)
    (tmp_path / ".cache" / "bin").mkdir(parents=True)
    return tmp_path


def run(repo: Path, tool: str, built_from: str, *, go: bool, **env: str) -> Run:
    """``scripts/install-<tool>`` with ``.cache/bin/<tool>`` built from ``built_from``."""
    bin_dir = repo / ".cache" / "bin"
    binary = bin_dir / tool
    binary.write_text("#!/bin/sh\necho fake\n")
    binary.chmod(0o755)
    (bin_dir / f"{tool}.module").write_text(f"{built_from}\n")
    path = repo / "path"
    path.mkdir(exist_ok=True)
    for needed in ("bash", "sh", "awk", "sed", "cat", "date", "mkdir", "dirname"):
        if (found := shutil.which(needed)) and not (path / needed).exists():
            (path / needed).symlink_to(found)
    if go:
        (path / "go").write_text(FAKE_GO)
        (path / "go").chmod(0o755)
    done = subprocess.run(
        [str(repo / "scripts" / f"install-{tool}")], capture_output=True, text=True, check=False,
        env={"PATH": str(path), "HOME": str(repo), **env}, timeout=60,
    )
    installs = bin_dir / "installs"
    return Run(done.returncode, done.stdout, done.stderr,
               installs.read_text().split() if installs.exists() else [])


TOOLS = ["prometheus", "promtool"]


@pytest.mark.parametrize("tool", TOOLS)
def test_with_go_a_binary_of_the_wanted_version_is_kept(repo: Path, tool: str) -> None:
    done = run(repo, tool, WANTED, go=True)
    assert done.code == 0, done.stderr
    assert done.installs == []
    assert done.stdout.splitlines()[-1] == str(repo / ".cache" / "bin" / tool)


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("asked", [{}, {"PROMETHEUS_MODULE_VERSION": "v0.317.0"}],
                         ids=["default", "asked"])
def test_with_go_a_binary_of_another_version_is_rebuilt(
    repo: Path, tool: str, asked: dict[str, str],
) -> None:
    done = run(repo, tool, STALE, go=True, **asked)
    want = asked.get("PROMETHEUS_MODULE_VERSION", WANTED)
    assert done.code == 0, done.stderr
    assert done.installs == [f"{MODULE}/cmd/{tool}@{want}"]
    assert f"want {want}: rebuilding" in done.stderr


@pytest.mark.parametrize("tool", TOOLS)
def test_without_go_the_binary_is_kept_with_a_warning(repo: Path, tool: str) -> None:
    done = run(repo, tool, STALE, go=False)
    assert done.code == 0, done.stderr
    assert "cannot be verified" in done.stderr
    assert done.stdout.splitlines()[-1] == str(repo / ".cache" / "bin" / tool)


@pytest.mark.parametrize("tool", TOOLS)
def test_without_go_a_version_asked_for_is_refused(repo: Path, tool: str) -> None:
    done = run(repo, tool, STALE, go=False, PROMETHEUS_MODULE_VERSION=WANTED)
    assert done.code == 1
    assert "PROMETHEUS_MODULE_VERSION" in done.stderr
    assert "cannot be verified" in done.stderr
    assert done.stdout == ""
