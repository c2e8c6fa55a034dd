"""The public benchmarks ``eval --format`` reads, as published: their files -> labelled rows,
and the figures published for them.

**LLM-AggreFact** (``lytang/LLM-AggreFact``; MiniCheck, Tang et al., EMNLP 2024): columns
``dataset``, ``doc``, ``claim``, ``label`` (int: 1 when the doc supports the claim, else 0) and
``contamination_identifier``; one Parquet file per split, dev and test. The leaderboard's figure
is balanced accuracy computed per ``dataset`` on the test split, then averaged with equal weight
over its 11 datasets (MiniCheck's evaluation notebook does exactly this; gpt-4o-2024-05-13's 11
leaderboard figures average to its 75.9).

**HaluBench** (``PatronusAI/HaluBench``; Lynx, Ravi et al., 2024): columns ``id``, ``passage``,
``question``, ``answer``, ``label`` (``PASS`` when the answer is faithful to the passage,
``FAIL`` when it is not) and ``source_ds``; one Parquet file, test. The paper's "context" is
the file's ``passage`` (a file with ``context`` instead is read too). Its figure is accuracy per
source, averaged with equal weight over the six sources: GPT-4o's 86.5 is the mean of its six
(87.9, 84.3, 85.3, 84.3, 95.0, 82.1), whereas pooling the 14,900 rows would let HaluEval's
10,000 dominate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from consumer.evaluation.benchmarks.tabular_file import read_table

Metric = Literal["balanced_accuracy", "accuracy"]


@dataclass(frozen=True, slots=True)
class Published:
    """A figure published for a judge model on a benchmark (0-1), and per group where the
    source gives them (keyed by the file's group column values)."""

    model: str  # as published, with its snapshot when the source names one
    family: str  # the JUDGE_MODEL compared with it: this name, or one of its dated snapshots
    value: float
    source: str
    per_group: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BenchmarkSet:
    """How one benchmark's files read, how its figure is computed, and what was published."""

    format: str  # eval --format
    name: str
    metric: Metric
    group_column: str  # the figure is averaged over its values with equal weight
    context_columns: tuple[str, ...]  # the first one the file has is read
    answer_column: str
    question_column: str | None
    id_column: str | None
    label_text: str  # what a label must be, for messages
    grounded: Callable[[object], bool | None]  # a label -> grounded?; None: not a label
    published: tuple[Published, ...]

    @property
    def required(self) -> str:
        """The columns a file must have, for messages."""
        first, *others = self.context_columns
        context = f"{first} (or {', '.join(others)})" if others else first
        return f"{context}, {self.answer_column}, label"

    @property
    def columns_read(self) -> frozenset[str]:
        """Every column this benchmark reads; the rest of a file is ignored."""
        optional = (self.question_column, self.id_column, self.group_column)
        return frozenset((*self.context_columns, self.answer_column, "label",
                          *(name for name in optional if name)))


@dataclass(frozen=True, slots=True)
class BenchmarkRow:
    """One row mapped to what ``eval`` judges: the answer against the context."""

    where: str  # "row 3" or "line 3"
    id: str
    input: str | None
    context: str
    answer: str
    grounded: bool
    group: str | None  # None when the file has no group column


def read_benchmark(path: Path, benchmark: BenchmarkSet) -> list[BenchmarkRow]:
    """The rows of a benchmark file; ValueError (one line) for the first problem: a missing
    column (naming those found), a bad label or value (naming its row), no rows."""
    table = read_table(path, benchmark.columns_read)
    if not table.columns:
        raise ValueError("is empty: no header and no rows")
    context = next((name for name in benchmark.context_columns if name in table.columns), None)
    missing = [name for name in (benchmark.answer_column, "label") if name not in table.columns]
    if context is None or missing:
        if context is None:
            missing.insert(0, " or ".join(benchmark.context_columns))
        raise ValueError(
            f"has no column {', '.join(missing)}: {benchmark.format} files have "
            f"{benchmark.required} (found: {', '.join(table.columns)})")
    if not table.rows:
        raise ValueError("has columns but no rows")
    grouped = benchmark.group_column in table.columns
    rows: list[BenchmarkRow] = []
    for where, values in table.rows:
        label = values.get("label")
        grounded = benchmark.grounded(label)
        if grounded is None:
            raise ValueError(f"{where}: label must be {benchmark.label_text}, got {label!r}")
        rows.append(BenchmarkRow(
            where=where,
            id=_id(values, benchmark.id_column, where),
            input=_optional_text(values, benchmark.question_column, where),
            context=_text(values, context, where),
            answer=_text(values, benchmark.answer_column, where),
            grounded=grounded,
            group=(str(values.get(benchmark.group_column) or "").strip() or "(none)"
                   if grouped else None),
        ))
    return rows


def _text(values: dict[str, Any], column: str, where: str) -> str:
    if column not in values:
        raise ValueError(f"{where}: no {column}")
    value = values[column]
    if not isinstance(value, str):
        raise ValueError(f"{where}: {column} must be text, got {value!r:.40}")
    return value


def _optional_text(values: dict[str, Any], column: str | None, where: str) -> str | None:
    if column is None or values.get(column) is None:
        return None
    return _text(values, column, where)


def _id(values: dict[str, Any], column: str | None, where: str) -> str:
    value = values.get(column) if column else None
    text = "" if value is None else str(value).strip()
    return text or where.replace(" ", "-")


def _supported(label: object) -> bool | None:
    """AggreFact's 1 / 0: an integer in Parquet and JSON, text in CSV ("1.0" when pandas wrote
    the column as floats)."""
    if isinstance(label, str):
        label = {"1": 1, "0": 0, "1.0": 1, "0.0": 0}.get(label.strip())
    if isinstance(label, int | float) and label in (0, 1):
        return bool(label)
    return None


def _passed(label: object) -> bool | None:
    """HaluBench's PASS / FAIL, in any case."""
    if not isinstance(label, str):
        return None
    return {"PASS": True, "FAIL": False}.get(label.strip().upper())


_LEADERBOARD = "LLM-AggreFact leaderboard (llm-aggrefact.github.io), test split"
_LYNX = "Lynx paper (Ravi et al., 2024, arXiv:2407.08488), Table 3"

AGGREFACT = BenchmarkSet(
    format="aggrefact",
    name="LLM-AggreFact",
    metric="balanced_accuracy",
    group_column="dataset",
    context_columns=("doc",),
    answer_column="claim",
    question_column=None,
    id_column=None,
    label_text="1 (supported) or 0 (unsupported)",
    grounded=_supported,
    published=(
        Published("gpt-4o-2024-05-13", "gpt-4o", 0.759, _LEADERBOARD, {
            "AggreFact-CNN": 0.681, "AggreFact-XSum": 0.768, "TofuEval-MediaS": 0.714,
            "TofuEval-MeetB": 0.798, "Wice": 0.785, "Reveal": 0.865, "ClaimVerify": 0.690,
            "FactCheck-GPT": 0.775, "ExpertQA": 0.596, "Lfqa": 0.836, "RAGTruth": 0.843}),
        Published("gpt-4o-mini-2024-07-18", "gpt-4o-mini", 0.740, _LEADERBOARD, {
            "AggreFact-CNN": 0.618, "AggreFact-XSum": 0.736, "TofuEval-MediaS": 0.713,
            "TofuEval-MeetB": 0.797, "Wice": 0.763, "Reveal": 0.858, "ClaimVerify": 0.698,
            "FactCheck-GPT": 0.760, "ExpertQA": 0.583, "Lfqa": 0.803, "RAGTruth": 0.816}),
    ),
)

HALUBENCH = BenchmarkSet(
    format="halubench",
    name="HaluBench",
    metric="accuracy",
    group_column="source_ds",
    context_columns=("passage", "context"),
    answer_column="answer",
    question_column="question",
    id_column="id",
    label_text="PASS or FAIL",
    grounded=_passed,
    # The paper names no snapshot of gpt-4o (it was written in July 2024).
    published=(Published("gpt-4o", "gpt-4o", 0.865, _LYNX),),
)

BENCHMARKS: dict[str, BenchmarkSet] = {AGGREFACT.format: AGGREFACT, HALUBENCH.format: HALUBENCH}
