"""The worker's exception tree: as ``errors.py`` draws it, and an outage is no trace's error."""

from __future__ import annotations

import inspect
import re

import pytest

from consumer import errors
from consumer.errors import JudgeError, JudgeUnavailable, WorkerError

_BRANCH = re.compile(r"^(?P<indent>[ │]*)[├└]── (?P<name>\w+)")


def drawn_tree() -> dict[str, str]:
    """child -> parent, as the module docstring draws the tree."""
    doc = errors.__doc__ or ""
    [root_line] = [line for line in doc.splitlines() if line.strip() == "WorkerError"]
    root_indent = len(root_line) - len(root_line.lstrip())
    parents, tree = ["WorkerError"], {}
    for line in doc.splitlines():
        if (branch := _BRANCH.match(line)) is None:
            continue
        depth = (len(branch["indent"]) - root_indent) // 4 + 1
        del parents[depth:]
        tree[branch["name"]] = parents[-1]
        parents.append(branch["name"])
    return tree


def test_the_docstring_draws_the_tree_as_it_is() -> None:
    classes = [cls for _, cls in inspect.getmembers(errors, inspect.isclass)
               if issubclass(cls, WorkerError) and cls is not WorkerError]
    assert drawn_tree() == {cls.__name__: cls.__bases__[0].__name__ for cls in classes}


def test_an_except_judge_error_never_swallows_an_outage() -> None:
    def score_one_trace() -> str:
        try:
            raise JudgeUnavailable("judge_http_503", "overloaded")
        except JudgeError:
            return "an error verdict"  # wrong for an outage: it must hold, not fail the trace

    with pytest.raises(JudgeUnavailable):
        score_one_trace()


def test_an_outage_says_what_failed() -> None:
    outage = JudgeUnavailable("judge_http_401", "invalid key")
    assert (outage.kind, outage.message, str(outage)) == (
        "judge_http_401", "invalid key", "judge_http_401: invalid key")
