"""The README and docs/: links and anchors resolve, named repo paths exist, the tree in
docs/architecture.md lists every module, and every variable the worker reads is documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.contract import WORKER_VARS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The worked examples of docs/extending.md: files a reader would add, not in the tree.
PLANNED = {"consumer/rules/answer_length.py", "consumer/inputs/flat_json.py"}
REPO_PATH = re.compile(r"`((?:consumer|tests|benchmarks|scripts|helm|schemas|docs)/[\w./\-]*)`")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading slugs of a page (code blocks skipped)."""
    slugs, in_code = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slugs.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return slugs


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_and_anchors_resolve(page: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in _anchors(dest)):
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_repo_paths_exist(page: Path) -> None:
    named = set(REPO_PATH.findall(page.read_text(encoding="utf-8"))) - PLANNED
    missing = sorted(p for p in named if "<" not in p and not (ROOT / p.rstrip(".")).exists())
    assert not missing, f"{page.name} names paths that do not exist: {missing}"


def test_the_architecture_tree_lists_every_module() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("## Where the code lives", 1)[1].split("```", 2)[1]
    stack: list[tuple[int, str]] = []
    listed = set()
    for line in block.splitlines():
        match = re.match(r"^( *)(\S+)", line)
        if match is None:
            continue
        indent, name = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if name.endswith("/"):
            stack.append((indent, name))
        elif name.endswith(".py"):
            listed.add("".join(part for _, part in stack) + name)
    modules = {
        str(p.relative_to(ROOT))
        for p in [*(ROOT / "consumer").rglob("*.py"), *(ROOT / "schemas").rglob("*.py")]
        if p.name != "__init__.py"
    }
    assert sorted(modules - listed) == [], "modules missing from the tree in docs/architecture.md"
    assert sorted(listed - modules) == [], "docs/architecture.md lists modules that do not exist"


def test_every_variable_is_documented() -> None:
    config = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert sorted(v for v in WORKER_VARS if f"`{v}`" not in config) == []


MENTION = re.compile(r"`{1,2}([\w./*-]*\w\.py)`{1,2}")
# ``folder/module.Name`` (not ``folder/file.md``)
DOTTED = re.compile(r"``((?:\w+/)+\w+)\.(?!(?:md|json|jsonl|yaml|yml|toml|txt)``)[A-Za-z_][\w.]*``")


def test_every_module_named_in_code_and_docs_exists() -> None:
    """A ``name.py`` (or ``folder/name.py``) named in a docstring, a comment or a page is a
    file of the repo: a module renamed or moved must not leave its old name behind."""
    files = [str(p.relative_to(ROOT)) for folder in ("consumer", "schemas", "scripts",
                                                      "benchmarks", "tests")
             for p in (ROOT / folder).rglob("*.py")]
    sources = [*PAGES, *(ROOT / "consumer").rglob("*.py"), *(ROOT / "scripts").rglob("*.py")]
    stale = sorted(
        f"{source.relative_to(ROOT)}: {name}"
        for source in sources
        for name in set(MENTION.findall(source.read_text(encoding="utf-8")))
        if "*" not in name and name not in PLANNED
        and not any(f == name or f.endswith("/" + name) for f in files)
    )
    dotted = sorted(
        f"{source.relative_to(ROOT)}: {name}"
        for source in sources
        for name in set(DOTTED.findall(source.read_text(encoding="utf-8")))
        if not (ROOT / name).exists()
        and not any(f.endswith(f"{name}.py") or f.endswith(f"{name}/__init__.py") for f in files)
    )
    assert stale == []
    assert dotted == []
