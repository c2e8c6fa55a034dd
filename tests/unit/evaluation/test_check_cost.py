"""`groundedness check` with the cost controls: the traces `TRACE_FILTER` leaves out get no
verdict, those `SAMPLE_RATE` leaves out no groundedness verdict, a repeated answer comes from
the cache without a call, and the summary on stderr says what was left out and what the judge
cost, in the verdicts' own figures."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from consumer.cli import main
from consumer.cost.pricing import format_usd
from consumer.cost.sampling import sampled
from tests.unit.evaluation.conftest import Judge, verdict_lines

DOCS = [{"id": "kb-1", "content": "Refunds are prorated to the day."}]


def rows() -> list[dict[str, Any]]:
    """40 traces, every fourth on staging, answers from 12 texts (so some repeat), one empty."""
    found: list[dict[str, Any]] = [
        {"trace_id": f"t{n:02d}", "input": "Are refunds prorated?",
         "output": f"Prorated to the day [1]. (text {n % 12})", "retrieved_documents": DOCS,
         "metadata": {"environment": "staging" if n % 4 == 0 else "production"}}
        for n in range(40)]
    found.append({"trace_id": "empty", "output": " ", "retrieved_documents": DOCS})
    return found


def test_check_leaves_out_samples_reuses_and_prices_as_the_worker(
    env: Judge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    judge, _ = env
    for name, value in {"RULES": "groundedness,missing_citation", "SAMPLE_RATE": "0.6",
                        "TRACE_FILTER": "metadata.environment == 'production'",
                        "JUDGE_CACHE_SIZE": "100", "JUDGE_PRICE_INPUT_PER_MILLION": "0.15",
                        "JUDGE_PRICE_OUTPUT_PER_MILLION": "0.60"}.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows()))

    code = main(["check", str(path)])

    captured = capsys.readouterr()
    verdicts = verdict_lines(captured.out)
    kept = [row for row in rows()[:40] if row["metadata"]["environment"] == "production"]
    judged = [row for row in kept if sampled(row["trace_id"], 0.6)]
    texts = {row["output"] for row in judged}
    assert 0 < len(judged) < len(kept)
    assert Counter((v["trace_id"], v["rule"]) for v in verdicts) == {
        **{(row["trace_id"], "missing_citation"): 1 for row in kept},
        **{(row["trace_id"], "groundedness"): 1 for row in judged}}
    assert judge.count() == len(texts), "one call per distinct text judged"
    grounded = [v for v in verdicts if v["rule"] == "groundedness"]
    hits = sum(bool(v.get("cached")) for v in grounded)
    assert hits == len(judged) - len(texts)
    spent = sum(v["cost_usd"] for v in grounded)
    tokens: Counter[str] = Counter()
    for v in grounded:
        tokens.update(v["usage"])
    assert captured.err.splitlines() == [
        "check: line 41: trace 'empty' has an empty output: not evaluated, no verdict",
        f"check: groundedness: {len(judged)} pass, 0 fail, 0 error",
        f"check: missing_citation: {len(kept)} pass, 0 fail, 0 error",
        "check: left out: 1 empty output",
        f"check: left out of groundedness: {40 - len(kept)} filtered out (<RULE>_FILTER or "
        f"TRACE_FILTER), {len(kept) - len(judged)} sampled out (<RULE>_SAMPLE_RATE or "
        "SAMPLE_RATE)",
        f"check: left out of missing_citation: {40 - len(kept)} filtered out (<RULE>_FILTER or "
        "TRACE_FILTER)",
        f"check: judge: {len(judged)} verdicts, {hits} from the cache, "
        f"{tokens['total_tokens']:,} tokens ({tokens['prompt_tokens']:,} prompt + "
        f"{tokens['completion_tokens']:,} completion), {format_usd(spent)}",
    ]
    assert spent > 0
    assert code == 0


@pytest.mark.parametrize("cache_size", ["0", "100"])
def test_without_prices_the_judge_line_says_so(
    env: Judge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], cache_size: str,
) -> None:
    monkeypatch.setenv("JUDGE_CACHE_SIZE", cache_size)
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows()[:3] * 2))

    assert main(["check", str(path)]) == 0

    judge_line = capsys.readouterr().err.splitlines()[-1]
    reused = "3" if cache_size == "100" else "0"
    assert judge_line.startswith(f"check: judge: 6 verdicts, {reused} from the cache, ")
    assert judge_line.endswith("completion), no prices set (JUDGE_PRICE_*)")
