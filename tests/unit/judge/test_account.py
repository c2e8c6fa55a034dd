"""The rate-limit headers read as OpenAI, Azure OpenAI and LiteLLM send them."""

from __future__ import annotations

import pytest

from consumer.judge.account import AccountState, Budget, parse_duration, read_account


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("1s", 1.0, id="seconds"),
        pytest.param("6m0s", 360.0, id="minutes-seconds"),
        pytest.param("12ms", 0.012, id="milliseconds"),
        pytest.param("1.5s", 1.5, id="fraction"),
        pytest.param("2m3.5s", 123.5, id="minutes-fraction"),
        pytest.param("1h2m3s", 3723.0, id="hours"),
        pytest.param("250us", 0.00025, id="microseconds"),
        pytest.param("7", 7.0, id="plain-seconds"),
        pytest.param(" 0.5 ", 0.5, id="spaces"),
        pytest.param("0s", 0.0, id="zero"),
    ],
)
def test_reset_durations_in_go_format_or_plain_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "1x", "s", "1s2", "-1s", "-3", "99999h", "1s 2s"])
def test_a_reset_that_is_not_a_duration_is_not_believed(text: str) -> None:
    assert parse_duration(text) is None


OPENAI = {
    "x-ratelimit-limit-requests": "5000", "x-ratelimit-remaining-requests": "4999",
    "x-ratelimit-reset-requests": "12ms", "x-ratelimit-limit-tokens": "160000",
    "x-ratelimit-remaining-tokens": "40000", "x-ratelimit-reset-tokens": "45s",
}


def test_openai_headers_give_both_budgets_and_the_tighter_share() -> None:
    account = read_account(OPENAI)
    assert account == AccountState(Budget(5000, 4999, 0.012), Budget(160000, 40000, 45.0))
    assert account.left == pytest.approx(0.25), "the tokens are the tighter budget"


def test_one_budget_alone_is_read_and_a_missing_reset_is_unknown() -> None:
    account = read_account({"x-ratelimit-limit-requests": "600",
                            "x-ratelimit-remaining-requests": "0"})
    assert account == AccountState(Budget(600, 0, None), None)
    assert account.left == 0.0


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="none-vllm"),
        pytest.param({"retry-after": "2"}, id="retry-after-only"),
        pytest.param({"x-ratelimit-limit-requests": "0",
                      "x-ratelimit-remaining-requests": "0"}, id="zero-limit"),
        pytest.param({"x-ratelimit-limit-requests": "many",
                      "x-ratelimit-remaining-requests": "3"}, id="not-a-number"),
        pytest.param({"x-ratelimit-remaining-requests": "3"}, id="remaining-alone"),
    ],
)
def test_headers_that_say_nothing_usable_read_as_none(headers: dict[str, str]) -> None:
    assert read_account(headers) is None


def test_remaining_above_the_limit_is_cut_to_it() -> None:
    account = read_account({"x-ratelimit-limit-tokens": "100",
                            "x-ratelimit-remaining-tokens": "250"})
    assert account is not None
    assert account.tokens == Budget(100, 100, None)
    assert account.left == 1.0
