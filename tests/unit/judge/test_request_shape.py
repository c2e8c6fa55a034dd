"""The wording of judge requests (pure): first shapes per model, fallbacks, merging."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer.judge.prompt import MAX_ANSWER_TOKENS
from consumer.judge.request_shape import (
    REASONING_ANSWER_TOKENS,
    RESPONSE_FORMATS,
    SHAPE_PARTS,
    RequestShape,
    shape_for,
)

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
    "model",
    ["ft:o4-mini-2025-04-16:acme::abc123", "my-o3-deployment", "prod_o1_mini", "o1_mini",
     "azure-gpt5", "gpt5-mini", "deepseek-reasoner", "deepseek-r1-distill-llama-70b",
     "deepseek/deepseek-r1", "qwq-32b"],
)
def test_reasoning_models_behind_other_names_get_the_reasoning_shape(model: str) -> None:
    """Fine-tunes, Azure deployments and other vendors' reasoning models: a 400-token budget
    would be spent reasoning, and every answer would come back empty."""
    shape = shape_for(model)
    assert shape.answer_tokens == REASONING_ANSWER_TOKENS
    assert shape.token_limits[0] == "max_completion_tokens"


def test_refusing_max_tokens_for_max_completion_tokens_raises_the_answer_budget() -> None:
    """An endpoint that wants ``max_completion_tokens`` serves a reasoning model."""
    shape = RequestShape().without("max_tokens")
    assert shape is not None
    assert shape.body("m", MESSAGES)["max_completion_tokens"] == REASONING_ANSWER_TOKENS
    # Concurrent rewordings merge to the larger budget, whichever came first.
    other = RequestShape().without("temperature")
    assert other is not None
    assert shape.merged(other).answer_tokens == other.merged(shape).answer_tokens == (
        REASONING_ANSWER_TOKENS)


def test_the_answer_budget_is_raised_once_to_the_reasoning_budget() -> None:
    raised = RequestShape().raised()
    assert raised is not None
    assert raised.answer_tokens == REASONING_ANSWER_TOKENS
    assert raised.body("m", MESSAGES)["max_tokens"] == REASONING_ANSWER_TOKENS
    assert raised.raised() is None  # already the largest budget
    assert shape_for("o3").raised() is None


@pytest.mark.parametrize(
    "model", ["gpt-4o-mini", "gpt-4o", "gpt-4.1-nano", "gpt-5-chat-latest", "llama-3.1-8b",
              "judge-deployment", "omni-moderation-latest", "gpt-50", "gpt-4.5-preview",
              "ft:gpt-4o-mini-2024-07-18:acme::abc123", "my-o3-chat", "deepseek-chat",
              "pro3-deployment", "halo3", "gpt-5.1-chat-latest"],
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
