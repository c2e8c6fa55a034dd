"""METRICS_MAX_PROJECTS: a trace's project as the metrics' label, bounded."""

from __future__ import annotations

from consumer.ops.metrics import MAX_PROJECT_CHARS, NO_PROJECT, OTHER_PROJECTS, ProjectLabels


def test_the_first_projects_keep_their_name_and_the_rest_are_other() -> None:
    labels = ProjectLabels(limit=2)
    assert [labels.label(p) for p in ("checkout", "search", "checkout", "billing", None, "")] == [
        "checkout", "search", "checkout", OTHER_PROJECTS, NO_PROJECT, NO_PROJECT]
    assert labels.label("search") == "search", "a kept project stays kept"


def test_a_hostile_stream_of_ids_makes_no_more_series_than_the_limit() -> None:
    labels = ProjectLabels(limit=20)
    seen = {labels.label(f"project-{n}" + "x" * 10_000) for n in range(100_000)}
    assert len(seen) == 21
    assert max(len(label) for label in seen) == MAX_PROJECT_CHARS


def test_zero_labels_no_project() -> None:
    assert ProjectLabels(limit=0).label("checkout") == OTHER_PROJECTS
