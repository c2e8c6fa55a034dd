"""The failure map as a table: each exception the SDK raises -> one action and error kind.

Pure (no network): the SDK's own exception types, built as it builds them. The judge's loop
reads nothing from a failure but this action (and, for the limiter, ``consumed_nothing``).
"""

from __future__ import annotations

import json

import aiohttp
import httpx2
import openai
import pytest

from consumer.judge.failures import MAX_RETRY_AFTER_S, Action, Failure, classify

REQUEST = httpx2.Request("POST", "http://judge/v1/chat/completions")


def status_error(
    status: int, message: str = "boom", code: str | None = None, param: str | None = None,
    headers: dict[str, str] | None = None,
) -> openai.APIStatusError:
    """A status error with OpenAI's error body (the map reads the status, not the subclass)."""
    response = httpx2.Response(status, request=REQUEST, headers=headers)
    body = {"message": message, "type": "x", "code": code, "param": param}
    return openai.APIStatusError(message, response=response, body=body)


def refused_connection() -> openai.APITimeoutError:
    """What the SDK's aiohttp transport raises for a refused connection: a "timeout"."""
    exc = openai.APITimeoutError(request=REQUEST)
    exc.__cause__ = aiohttp.ClientConnectionError("Connection refused")
    return exc


@pytest.mark.parametrize(
    ("exc", "action", "kind"),
    [
        pytest.param(openai.APIConnectionError(request=REQUEST), Action.RETRY,
                     "judge_unreachable", id="connection"),
        pytest.param(refused_connection(), Action.RETRY, "judge_unreachable",
                     id="refused-posing-as-timeout"),
        pytest.param(openai.APITimeoutError(request=REQUEST), Action.HOLD_OR_ERROR,
                     "judge_timeout", id="timeout"),
        pytest.param(json.JSONDecodeError("Expecting value", "<html>", 0), Action.RETRY,
                     "judge_bad_response", id="malformed-body"),
        pytest.param(status_error(503), Action.RETRY, "judge_http_503", id="503"),
        pytest.param(status_error(408), Action.RETRY, "judge_http_408", id="408"),
        pytest.param(status_error(409), Action.RETRY, "judge_http_409", id="409"),
        pytest.param(status_error(429, "Rate limit reached"), Action.WAIT, "judge_rate_limited",
                     id="429"),
        pytest.param(status_error(429, "Request too large for gpt-4o-mini"), Action.ERROR,
                     "request_too_large", id="429-too-large"),
        pytest.param(status_error(401), Action.HOLD_OR_CONFIRM, "judge_http_401", id="401"),
        pytest.param(status_error(403), Action.HOLD_OR_CONFIRM, "judge_http_403", id="403"),
        pytest.param(status_error(404), Action.HOLD_OR_CONFIRM, "judge_http_404", id="404"),
        pytest.param(status_error(400, "bad value", code="invalid_value", param="max_tokens"),
                     Action.HOLD_OR_CONFIRM, "judge_http_400", id="400-a-value"),
        pytest.param(status_error(400, "maximum context length", code="context_length_exceeded"),
                     Action.ERROR, "context_too_long", id="context-length"),
        pytest.param(status_error(400, "flagged", code="content_filter"), Action.ERROR,
                     "refused", id="content-filter"),
        pytest.param(status_error(400, "Unsupported parameter: 'temperature'",
                                  code="unsupported_parameter", param="temperature"),
                     Action.RESHAPE, "temperature_rejected", id="refused-part"),
    ],
)
def test_each_failure_maps_to_one_action(exc: Exception, action: Action, kind: str) -> None:
    assert isinstance(exc, openai.OpenAIError | ValueError)
    failure = classify(exc)
    assert (failure.action, failure.kind) == (action, kind)


def test_retry_after_is_read_and_bounded() -> None:
    assert classify(status_error(429, headers={"retry-after-ms": "1500"})).retry_after_s == 1.5
    assert classify(status_error(503, headers={"retry-after": "7"})).retry_after_s == 7.0
    huge = status_error(429, headers={"retry-after": "86400"})
    assert classify(huge).retry_after_s == MAX_RETRY_AFTER_S
    dated = status_error(429, headers={"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})
    assert classify(dated).retry_after_s is None  # our own backoff, then


def test_a_refused_part_with_no_other_wording_is_decided_as_a_refusal() -> None:
    reshape = Failure(Action.RESHAPE, "temperature_rejected", "no", status=400, param="temperature")
    refusal = reshape.as_refusal()
    assert (refusal.action, refusal.kind) == (Action.HOLD_OR_CONFIRM, "judge_http_400")
    assert (refusal.message, refusal.status, refusal.param) == ("no", 400, "temperature")
