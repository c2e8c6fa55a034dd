"""``groundedness sample``: where pip put the bundled data files, and what they hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from consumer.cli import main
from consumer.evaluation.labelled_rules import RULES_SAMPLE
from consumer.jsonl import LABELLED_SAMPLE


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["sample", *args])
    return code, capsys.readouterr().out


def test_path_alone_is_the_labelled_sample(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "--path")
    assert (code, out) == (0, f"{LABELLED_SAMPLE}\n")
    assert Path(out.strip()).is_file()


@pytest.mark.parametrize(("name", "path"), [pytest.param("factcheck-gpt", LABELLED_SAMPLE,
                                                         id="factcheck-gpt"),
                                            pytest.param("rules", RULES_SAMPLE, id="rules")])
def test_a_named_sample(capsys: pytest.CaptureFixture[str], name: str, path: Path) -> None:
    assert run(capsys, name, "--path") == (0, f"{path}\n")
    assert run(capsys, name) == (0, path.read_text(encoding="utf-8"))


def test_without_arguments_every_sample_is_listed_with_its_path(
    capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run(capsys)
    assert code == 0
    for name, path in (("factcheck-gpt", LABELLED_SAMPLE), ("rules", RULES_SAMPLE)):
        (line,) = [line for line in out.splitlines() if line.startswith(f"{name} ")]
        assert str(path) in line
