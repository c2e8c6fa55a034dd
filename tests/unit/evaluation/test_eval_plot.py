"""``eval --plot``: the bars stand on the score axis, so a threshold line at 0.5 is at 0.5."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from consumer.evaluation.report import plot_scores

plt = pytest.importorskip("matplotlib.pyplot")

SCORES = {"grounded": {"0.00": 3, "0.50": 4, "1.00": 9},
          "ungrounded": {"0.00": 8, "0.25": 5, "0.50": 2}}


def drawn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **report: Any) -> Any:
    """The axes ``plot_scores`` drew (kept from ``plt.close``)."""
    figures: list[Any] = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot_scores(tmp_path / "plot.png", {"scores": SCORES, "judge_model": "m", "count": 31,
                                        **report})
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"
    (figure,) = figures
    (axes,) = figure.axes
    return axes


def test_threshold_lines_sit_at_their_score(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    axes = drawn(tmp_path, monkeypatch, threshold=0.75, best_threshold=0.5,
                 best_threshold_balanced_accuracy=0.8)
    assert sorted(line.get_xdata()[0] for line in axes.lines) == [0.5, 0.75]


def test_each_score_s_bars_stand_just_above_it_on_the_score_axis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A score's bars start at it and end before the next score: a threshold line at 0.5
    has the 0.5 bars (which pass) on its right, the 0.25 bars (which fail) on its left."""
    axes = drawn(tmp_path, monkeypatch, threshold=0.5, best_threshold=0.5,
                 best_threshold_balanced_accuracy=0.8)
    values = [0.0, 0.25, 0.5, 1.0]
    for container, label in zip(axes.containers, ("grounded", "ungrounded"), strict=True):
        assert container.get_label().startswith(label)
        heights = [bar.get_height() for bar in container]
        assert heights == [SCORES[label].get(f"{v:.2f}", 0) for v in values]
        for bar, value in zip(container, values, strict=True):
            assert value <= bar.get_x() < bar.get_x() + bar.get_width() < value + 0.25
    (line,) = axes.lines
    assert line.get_xdata()[0] == 0.5
    low, high = axes.get_xlim()
    assert (low < 0, high > 1) == (True, True)
    assert list(axes.get_xticks()) == values
