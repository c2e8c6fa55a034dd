"""``scripts/heuristic-accuracy``: how well the offline heuristic agrees with a labelled sample.

Raw score >= 3 passes (the pass cut ``CUT_POINTS[1]`` at the demo threshold 0.5). Balanced
accuracy and the per-class recalls are ``consumer.evaluation.calibration``'s, computed the way
``groundedness eval`` computes them; the held-out figure chooses the pass cut on one half of
the sample and scores it on the other.

    python -m consumer.evaluation.heuristic_accuracy [--dataset FILE]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from consumer.errors import ConfigError
from consumer.evaluation.calibration import Confusion, confusion
from consumer.jsonl import LABELLED_SAMPLE, read_labelled
from consumer.localjudge.heuristic import CUT_POINTS, assess, document_texts

# The pass cuts tried when tuning CUT_POINTS[1] (the one cut chosen on the sample).
PASS_CUT_GRID = tuple(round(0.4 + 0.05 * i, 2) for i in range(12))


def pass_confusion(supports: Sequence[float], grounded: Sequence[bool],
                   pass_cut: float) -> Confusion:
    """Labels crossed with verdicts when support >= ``pass_cut`` passes."""
    return confusion([not g for g in grounded], [s < pass_cut for s in supports])


def pass_cut_accuracy(supports: Sequence[float], grounded: Sequence[bool],
                      pass_cut: float) -> float:
    """Balanced accuracy when support >= ``pass_cut`` passes (both classes must occur)."""
    accuracy = pass_confusion(supports, grounded, pass_cut).balanced_accuracy
    if accuracy is None:
        raise ValueError("balanced accuracy needs grounded and ungrounded examples")
    return accuracy


def best_pass_cut(supports: Sequence[float], grounded: Sequence[bool]) -> float:
    """The grid cut with the best balanced accuracy (the lowest one on ties)."""
    return max(PASS_CUT_GRID, key=lambda cut: (pass_cut_accuracy(supports, grounded, cut), -cut))


def held_out_accuracy(
    supports: Sequence[float], grounded: Sequence[bool], repeats: int = 10
) -> float:
    """Balanced accuracy of a cut chosen on one half and scored on the other, 2-fold, repeated."""
    scores: list[float] = []
    for seed in range(repeats):
        order = list(range(len(supports)))
        random.Random(seed).shuffle(order)  # noqa: S311 (a data split, not a secret)
        halves = (order[::2], order[1::2])
        for train, test in (halves, halves[::-1]):
            cut = best_pass_cut([supports[i] for i in train], [grounded[i] for i in train])
            scores.append(
                pass_cut_accuracy([supports[i] for i in test], [grounded[i] for i in test], cut)
            )
    return sum(scores) / len(scores)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the heuristic's accuracy on a labelled JSONL sample (raw >= 3 passes)."""
    parser = argparse.ArgumentParser(
        prog="python -m consumer.evaluation.heuristic_accuracy", description=main.__doc__
    )
    parser.add_argument("--dataset", type=Path, default=LABELLED_SAMPLE)
    args = parser.parse_args(argv)
    try:
        rows = read_labelled(args.dataset)
    except (OSError, ValueError, ConfigError) as exc:  # ValueError: a malformed row
        print(f"error: {args.dataset}: {exc}", file=sys.stderr)
        return 2
    assessments = [assess(document_texts(r.documents), str(r.output or "")) for r in rows]
    grounded = [r.grounded for r in rows]
    cells = confusion([not g for g in grounded], [a.score < 3 for a in assessments])
    supports = [a.support for a in assessments]
    print(f"dataset: {args.dataset}: {cells.tn + cells.fp} grounded, "
          f"{cells.tp + cells.fn} ungrounded")
    print(f"balanced accuracy (raw >= 3 passes): {_share(cells.balanced_accuracy)}")
    print(f"recall grounded: {_share(cells.specificity)}  "
          f"recall ungrounded: {_share(cells.recall)}")
    print(
        f"confusion: grounded pass {cells.tn}, fail {cells.fp}; "
        f"ungrounded pass {cells.fn}, fail {cells.tp}"
    )
    print(
        f"pass cut {CUT_POINTS[1]} (best on this sample: {best_pass_cut(supports, grounded)}); "
        f"held-out balanced accuracy, cut chosen on the other half (2-fold x 10): "
        f"{held_out_accuracy(supports, grounded):.3f}"
    )
    histogram = Counter((a.score, g) for a, g in zip(assessments, grounded, strict=True))
    print("score  grounded  ungrounded")
    for score in range(1, 6):
        print(f"{score:>5}  {histogram[score, True]:>8}  {histogram[score, False]:>10}")
    return 0


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    raise SystemExit(main())
