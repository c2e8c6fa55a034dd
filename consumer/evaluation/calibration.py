"""How well verdicts agree with labels: the metrics behind ``groundedness eval`` (pure).

The positive class is UNGROUNDED: a ``fail`` verdict predicts it, a ``pass`` predicts
grounded. ROC AUC ranks by risk = 1 - score (a low score means likely ungrounded) with the
Mann-Whitney statistic, so a tie between a positive and a negative counts one half. A
threshold ``t`` means pass when score >= t, as the worker applies ``MIN_ACCEPTABLE_SCORE``.
Undefined metrics (nothing predicted positive, one class missing) are ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Confusion:
    """Counts with ungrounded as positive: tp = ungrounded judged fail, and so on."""

    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def precision(self) -> float | None:
        """Of the traces judged fail, the share that were ungrounded."""
        return _ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float | None:
        """Of the ungrounded traces, the share judged fail."""
        return _ratio(self.tp, self.tp + self.fn)

    @property
    def specificity(self) -> float | None:
        """Of the grounded traces, the share judged pass."""
        return _ratio(self.tn, self.tn + self.fp)

    @property
    def f1(self) -> float | None:
        """Harmonic mean of precision and recall."""
        return _ratio(2 * self.tp, 2 * self.tp + self.fp + self.fn)

    @property
    def accuracy(self) -> float | None:
        """The share of all traces whose verdict agrees with the label."""
        return _ratio(self.tp + self.tn, self.tp + self.fp + self.fn + self.tn)

    @property
    def balanced_accuracy(self) -> float | None:
        """Mean of the recalls of both classes (undefined unless both classes occur)."""
        if self.recall is None or self.specificity is None:
            return None
        return (self.recall + self.specificity) / 2

    def as_matrix(self) -> dict[str, dict[str, int]]:
        """Rows are labels, columns are verdicts."""
        return {
            "ungrounded": {"fail": self.tp, "pass": self.fn},
            "grounded": {"fail": self.fp, "pass": self.tn},
        }


@dataclass(frozen=True, slots=True)
class Threshold:
    """A pass threshold and the balanced accuracy it reaches."""

    threshold: float
    balanced_accuracy: float


def confusion(ungrounded: Sequence[bool], failed: Sequence[bool]) -> Confusion:
    """Cross the labels (True = ungrounded) with the verdicts (True = fail)."""
    _same_length(ungrounded, failed)
    pairs = list(zip(ungrounded, failed, strict=True))
    return Confusion(
        tp=sum(1 for label, fail in pairs if label and fail),
        fp=sum(1 for label, fail in pairs if not label and fail),
        fn=sum(1 for label, fail in pairs if label and not fail),
        tn=sum(1 for label, fail in pairs if not label and not fail),
    )


def roc_auc(positive: Sequence[bool], risk: Sequence[float]) -> float | None:
    """P(risk of a random positive > risk of a random negative), ties counting one half.

    Computed from average ranks (Mann-Whitney U / (P * N)) in O(n log n).
    """
    _same_length(positive, risk)
    n_pos = sum(1 for p in positive if p)
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = _average_ranks(risk)
    rank_sum = sum(rank for rank, p in zip(ranks, positive, strict=True) if p)
    u_statistic = rank_sum - n_pos * (n_pos + 1) / 2
    return u_statistic / (n_pos * n_neg)


def best_threshold(ungrounded: Sequence[bool], scores: Sequence[float]) -> Threshold | None:
    """The distinct score that, used as the pass threshold, maximises balanced accuracy.

    Ties go to the lowest threshold (the most lenient cut with the best balance).
    """
    _same_length(ungrounded, scores)
    best: Threshold | None = None
    for candidate in sorted(set(scores)):
        failed = [score < candidate for score in scores]
        accuracy = confusion(ungrounded, failed).balanced_accuracy
        if accuracy is None:
            return None  # one class is missing: no threshold can be judged
        if best is None or accuracy > best.balanced_accuracy + 1e-12:
            best = Threshold(candidate, accuracy)
    return best


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (0 < q <= 100); None for no values."""
    if not values:
        return None
    if not 0 < q <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {q}")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks; tied values share the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        shared = (start + end) / 2 + 1
        for position in range(start, end + 1):
            ranks[order[position]] = shared
        start = end + 1
    return ranks


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def _same_length(first: Sequence[object], second: Sequence[object]) -> None:
    if len(first) != len(second):
        raise ValueError(f"{len(first)} labels but {len(second)} predictions")
