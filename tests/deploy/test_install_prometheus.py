"""``scripts/install-prometheus`` and ``scripts/install-promtool`` with a binary already in
``.cache/bin``: kept when it is Debian's build of the wanted version, or was built from the
wanted module version (go reads that from the binary), reinstalled otherwise; without go, a
module's version cannot be read: kept with a warning, or refused when
``PROMETHEUS_MODULE_VERSION`` asked for a version. Without a binary, Debian's package comes
first, the Go build when Debian's lists have no wanted version.

Each run is in a copy of the scripts with a stand-in binary and, when go is present, a
stand-in ``go`` that reports the binary's module from a file and "builds" by rewriting it;
with ``deb``, stand-in ``apt-cache``, ``apt-get`` and ``dpkg-deb`` that offer a package of
that version: nothing is fetched.
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
# go version -m <binary>: its module, from <binary>.module; go install [flags] <module>@<v>:
# rebuilds.
set -e
if [[ "$1" == version ]]; then
    printf '\\tmod\\t{MODULE}\\t%s\\th1:x=\\n' "$(cat "$3.module")"
elif [[ "$1" == install ]]; then
    module="${{@: -1}}"; name="${{module%@*}}"; name="${{name##*/}}"
    echo "${{module##*@}}" > "$GOBIN/$name.module"
    echo "$module" >> "$GOBIN/installs"
fi
"""
DEBIAN = "2.42.0+ds-5+deb12u1"  # a Debian revision of the default PROMETHEUS_DEB_VERSION
DEB_VERSION_LINE = "{tool}, version {upstream} (branch: debian/sid, revision: {version})"
FAKE_APT_CACHE = """#!/bin/bash
# apt-cache madison prometheus: the one version offered.
echo " prometheus | $(cat "$HOME/deb-version") | http://deb.example/debian bookworm/main amd64"
"""
FAKE_APT_GET = """#!/bin/bash
# apt-get download [options] prometheus=<version>: an empty .deb of that version.
package="${@: -1}"
touch "prometheus_${package#prometheus=}_amd64.deb"
echo "$package" >> "$HOME/apt-downloads"
"""
FAKE_DPKG_DEB = """#!/bin/bash
# dpkg-deb -x <deb> <dir>: both commands, saying they are Debian's build of the version.
version="${2##*/prometheus_}"; version="${version%_amd64.deb}"
mkdir -p "$3/usr/bin"
for tool in prometheus promtool; do
    printf '#!/bin/sh\necho "%s, version %s (branch: debian/sid, revision: %s)"\n' \
        "$tool" "${version%-*}" "$version" > "$3/usr/bin/$tool"
    chmod +x "$3/usr/bin/$tool"
done
"""


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
    installs: list[str]


def make_repo(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    for script in ("install-prometheus", "install-promtool", "install-prometheus-tool"):
        shutil.copy2(REPO_ROOT / "scripts" / script, tmp_path / "scripts" / script)
    (tmp_path / ".cache" / "bin").mkdir(parents=True)
    return tmp_path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path)


NEEDED = ("bash", "sh", "awk", "sed", "cat", "date", "mkdir", "dirname", "head", "grep", "cp",
          "mv", "rm", "touch", "chmod")


def run(repo: Path, tool: str, built_from: str | None, *, go: bool, deb: str | None = None,
        version_line: str = "fake", **env: str) -> Run:
    """``scripts/install-<tool>`` with ``.cache/bin/<tool>`` built from ``built_from`` (printing
    ``version_line``; ``None``: no binary), and Debian's lists offering ``deb`` (``None``: no apt).
    """
    bin_dir = repo / ".cache" / "bin"
    binary = bin_dir / tool
    if built_from is not None:
        binary.write_text(f"#!/bin/sh\necho '{version_line}'\n")
        binary.chmod(0o755)
        (bin_dir / f"{tool}.module").write_text(f"{built_from}\n")
    path = repo / "path"
    path.mkdir(exist_ok=True)
    for needed in NEEDED:
        if (found := shutil.which(needed)) and not (path / needed).exists():
            (path / needed).symlink_to(found)
    fakes = {"go": FAKE_GO} if go else {}
    if deb is not None:
        (repo / "deb-version").write_text(deb)
        fakes |= {"apt-cache": FAKE_APT_CACHE, "apt-get": FAKE_APT_GET, "dpkg-deb": FAKE_DPKG_DEB}
    for name, text in fakes.items():
        (path / name).write_text(text)
        (path / name).chmod(0o755)
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


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("go", [True, False], ids=["go", "no-go"])
def test_debians_build_of_the_wanted_version_is_kept(tmp_path: Path, tool: str, go: bool) -> None:
    repo = make_repo(tmp_path)
    line = DEB_VERSION_LINE.format(tool=tool, upstream="2.42.0+ds", version=DEBIAN)
    done = run(repo, tool, STALE, go=go, version_line=line)
    assert done.code == 0, done.stderr
    assert done.installs == []
    assert "already installed: Debian's" in done.stderr
    assert done.stdout.splitlines()[-1] == str(repo / ".cache" / "bin" / tool)


@pytest.mark.parametrize("tool", TOOLS)
def test_without_a_binary_debians_package_comes_first(tmp_path: Path, tool: str) -> None:
    repo = make_repo(tmp_path)
    done = run(repo, tool, None, go=True, deb=DEBIAN)
    assert done.code == 0, done.stderr
    assert done.installs == []
    assert (repo / "apt-downloads").read_text().split() == [f"prometheus={DEBIAN}"]
    binary = repo / ".cache" / "bin" / tool
    assert done.stdout.splitlines()[-1] == str(binary)
    assert f"revision: {DEBIAN}" in subprocess.run(
        [str(binary)], capture_output=True, text=True, check=True).stdout
    # The other command comes from the package already unpacked: no second download.
    other = next(t for t in TOOLS if t != tool)
    again = run(repo, other, None, go=True, deb=DEBIAN)
    assert again.code == 0, again.stderr
    assert (repo / "apt-downloads").read_text().split() == [f"prometheus={DEBIAN}"]


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("env", [{"PROMETHEUS_SOURCE": "go"},
                                 {"PROMETHEUS_MODULE_VERSION": WANTED}], ids=["source", "module"])
def test_asked_for_go_debians_package_is_not_used(
    tmp_path: Path, tool: str, env: dict[str, str],
) -> None:
    repo = make_repo(tmp_path)
    done = run(repo, tool, None, go=True, deb=DEBIAN, **env)
    assert done.code == 0, done.stderr
    assert done.installs == [f"{MODULE}/cmd/{tool}@{WANTED}"]
    assert not (repo / "apt-downloads").exists()


@pytest.mark.parametrize("tool", TOOLS)
def test_another_debian_version_is_not_used(tmp_path: Path, tool: str) -> None:
    repo = make_repo(tmp_path)
    done = run(repo, tool, None, go=True, deb="2.53.3+ds1-1")
    assert done.code == 0, done.stderr
    assert "no prometheus 2.42.0" in done.stderr
    assert done.installs == [f"{MODULE}/cmd/{tool}@{WANTED}"]
