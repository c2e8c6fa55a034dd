"""What a model list says of the model asked for: listed, answered under another name, or not."""

from __future__ import annotations

import pytest

from consumer.judge.models import ANSWERS_ANY_MODEL, answering_model


@pytest.mark.parametrize(
    ("listed", "answering"),
    [
        pytest.param([("gpt-4o", "openai"), ("gpt-4o-mini", "system")], "gpt-4o-mini",
                     id="listed"),
        pytest.param([("gpt-4o", "openai")], None, id="not-listed"),
        pytest.param([], None, id="empty-list"),
        pytest.param([("groundedness-local-judge-v2", ANSWERS_ANY_MODEL)],
                     "groundedness-local-judge-v2", id="answers-any-name"),
        pytest.param([("other", ANSWERS_ANY_MODEL), ("gpt-4o-mini", "local")], "gpt-4o-mini",
                     id="listed-wins-over-any"),
        pytest.param([("local-judge", "local")], None, id="another-owner-is-not-any"),
    ],
)
def test_answering_model(listed: list[tuple[str, str | None]], answering: str | None) -> None:
    assert answering_model("gpt-4o-mini", listed) == answering
