"""The wording of judge requests (pure): first shapes per model, fallbacks, merging."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer.judge_shape import (
    REASONING_ANSWER_TOKENS,
    RESPONSE_FORMATS,
    SHAPE_PARTS,
    RequestShape,
    shape_for,
)
from consumer.prompt import MAX_ANSWER_TOKENS

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    "model",
    ["o1", "o1-mini", "o3-2025-04-16", "o4-mini", "gpt-5", "gpt-5-nano", "gpt-5.1",
     "openai/o3-mini", "GPT-5-mini"],
)
def test_reasoning_families_start_with_max_completion_tokens_and_no_temperature(
    model: str,
) -> None:
    body = shape_for(model).body(model, MESSAGES)
    assert body["max_completion_tokens"] == REASONING_ANSWER_TOKENS
    assert not {"max_tokens", "temperature"} & body.keys()
    assert body["response_format"]["type"] == "json_schema"


@pytest.mark.parametrize(
    "model", ["gpt-4o-mini", "gpt-4o", "gpt-4.1-nano", "gpt-5-chat-latest", "llama-3.1-8b",
              "judge-deployment", "omni-moderation-latest", "gpt-50"],
)
def test_other_models_start_as_chat_models(model: str) -> None:
    body = shape_for(model).body(model, MESSAGES)
    assert (body["max_tokens"], body["temperature"]) == (MAX_ANSWER_TOKENS, 0)
    assert "max_completion_tokens" not in body


def test_each_refusal_moves_to_the_next_wording_and_ends() -> None:
    shape = RequestShape()
    assert shape.without("max_completion_tokens") is None  # not what this shape sends
    steps = [shape]
    for part in ("response_format", "response_format", "max_tokens", "max_completion_tokens",
                 "temperature"):
        nxt = steps[-1].without(part)
        assert nxt is not None
        steps.append(nxt)
    last = steps[-1].body("m", MESSAGES)
    assert last == {"model": "m", "messages": MESSAGES}
    assert all(steps[-1].without(part) is None for part in SHAPE_PARTS)


parts = st.lists(st.sampled_from(sorted(SHAPE_PARTS)), max_size=8)


def reworded(shape: RequestShape, refusals: list[str]) -> RequestShape:
    for part in refusals:
        shape = shape.without(part) or shape
    return shape


@given(first=parts, second=parts)
def test_merging_never_goes_back(first: list[str], second: list[str]) -> None:
    """Two requests reworded concurrently from the same start: the merge has every
    fallback either reached, in any order."""
    a, b = reworded(RequestShape(), first), reworded(RequestShape(), second)
    merged = a.merged(b)
    assert merged == b.merged(a)
    assert merged.merged(a) == merged
    # It goes back to nothing either of them fell back from.
    assert set(merged.token_limits) == set(a.token_limits) & set(b.token_limits)
    assert merged.temperature == (a.temperature and b.temperature)
    levels = [RESPONSE_FORMATS.index(shape.response_format) for shape in (merged, a, b)]
    assert levels[0] == max(levels[1:])
