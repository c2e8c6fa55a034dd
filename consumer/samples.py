"""``groundedness sample``: the data files bundled with the package, found where pip installed
them (``consumer/data/`` exists only in a clone of the repository)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from consumer.errors import ConfigError
from consumer.evaluation.labelled_rules import RULES_SAMPLE
from consumer.jsonl import LABELLED_SAMPLE

DEFAULT = "factcheck-gpt"


@dataclass(frozen=True, slots=True)
class Sample:
    """A bundled data file and what it is for."""

    name: str
    path: Path
    about: str


SAMPLES = {sample.name: sample for sample in (
    Sample(DEFAULT, LABELLED_SAMPLE,
           "514 Factcheck-GPT claims labelled grounded/ungrounded: eval, check, load-sample"),
    Sample("rules", RULES_SAMPLE,
           "42 hand-made traces labelled per rule: eval --format rules, check"),
)}


def sample_listing() -> list[str]:
    """A line per sample: its name, its path, what it holds."""
    width = max(len(name) for name in SAMPLES)
    return [f"{s.name:<{width}}  {s.path}\n{'':<{width}}  {s.about}" for s in SAMPLES.values()]


def print_sample(name: str | None, *, path_only: bool) -> None:
    """``sample``: the listing; ``sample NAME``: the file on stdout; ``--path``: its path
    (``NAME``'s, else the labelled sample's)."""
    if name is None and not path_only:
        print("\n".join(sample_listing()))
        print("(their sources and licences: README.md beside them)")
        return
    sample = SAMPLES[name or DEFAULT]
    if path_only:
        print(sample.path)
        return
    try:
        text = sample.path.read_text(encoding="utf-8")
    except OSError as exc:  # an install without its package data
        raise ConfigError(f"sample: cannot read {sample.path}: {exc}") from exc
    sys.stdout.write(text)
