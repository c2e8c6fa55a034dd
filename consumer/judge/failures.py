"""The judge's failure map: every exception a chat-completions call raises -> one action.

    RETRY            transient (408, 409, 5xx, connection, malformed body): back off and
                     retry, honouring Retry-After; past the retries, HOLD_OR_CONFIRM
    WAIT             a 429 for a rate limit, the account's: backpressure, never an outage.
                     Everyone waits its Retry-After and slows (``pacing.py``), and the call is
                     retried; past the retries, this trace goes round again (a bounded
                     number of times)
    HOLD             the judge failing for everyone by its own word (429
                     ``insufficient_quota``: the account is out of credit): hold at once
    HOLD_OR_CONFIRM  any other refusal (401, 403, 404, most 400s): an outage unless the judge
                     answers others; else one more try, then this trace's error
    HOLD_OR_ERROR    no answer in time: an outage unless the judge answers others; else this
                     trace's error at once (a second hang would hold a slot for another timeout)
    RESHAPE          the endpoint refuses a part of the request by name (response_format,
                     max_tokens, max_completion_tokens, temperature): send it again reworded;
                     with no other wording left, ``as_refusal`` makes it HOLD_OR_CONFIRM
    ERROR            the trace's own content is the cause (context too long, a content filter,
                     a request larger than the tokens-per-minute limit): its error, at once

This is the one place that knows the openai SDK's exception types and OpenAI's error bodies.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, replace

import aiohttp
import openai

from consumer.judge.request_shape import SHAPE_PARTS

MAX_RETRY_AFTER_S = 120.0
# How OpenAI and OpenAI-compatible servers name a parameter the model does not take.
_REFUSED_PART = re.compile(
    r"(?:unsupported (?:parameter|value)|unrecognized request argument(?: supplied)?"
    r"|unknown (?:parameter|argument|field))\W+(\w+)",
    re.IGNORECASE,
)
_UNSUPPORTED_CODES = frozenset({"unsupported_parameter", "unsupported_value"})
# Wording that refuses the response format itself, either way round ("'response_format' of
# type 'json_schema' is not supported", "invalid response format", "structured outputs are not
# supported"). Nothing in between may be a brace: a gateway that echoes the request body
# ("Blocked by policy: {... "response_format": {...}}") names the part but refuses the trace.
_FORMAT = r"(?:response[_ ]format|json_schema|json_object|structured outputs?)"
_REFUSAL = r"(?:not supported|unsupported|invalid|not allowed|not available|unrecognized|unknown)"
_FORMAT_REFUSED = re.compile(
    rf"{_FORMAT}[^{{}}]{{0,60}}?\b{_REFUSAL}\b|\b{_REFUSAL}\b[^{{}}]{{0,30}}?{_FORMAT}",
    re.IGNORECASE,
)
# OpenAI's tokens-per-minute 429: "Limit 30000, Used 1200, Requested 45000". Asking for more
# than the whole limit never fits, whatever the wait (some say so only by these numbers).
_LIMIT_REQUESTED = re.compile(
    r"\blimit:?\s+([\d,]+)(?:,\s*used:?\s+[\d,]+)?,\s*requested:?\s+([\d,]+)", re.IGNORECASE
)


class Action(enum.Enum):
    """What the judge does about a failed call (the table in this module's docstring)."""

    RETRY = "retry"
    WAIT = "wait"
    HOLD = "hold"
    HOLD_OR_CONFIRM = "hold_or_confirm"
    HOLD_OR_ERROR = "hold_or_error"
    RESHAPE = "reshape"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed call: what to do, the error kind and message a verdict would carry, and
    what the log line names (HTTP status, the parameter the endpoint pointed at)."""

    action: Action
    kind: str
    message: str
    status: int | None = None
    param: str | None = None
    retry_after_s: float | None = None
    code: str | None = None  # the error body's ``code`` (``rate_limit_exceeded``, ...)

    @property
    def consumed_nothing(self) -> bool:
        """Refused before the model ran (no connection, a 4xx, a 429): it cost no tokens.
        A 5xx or a timeout may have run the model, so their estimate stays counted."""
        status = self.status
        return self.kind == "judge_unreachable" or (status is not None and 400 <= status < 500)

    def as_refusal(self) -> Failure:
        """A refused part the request's wording has no fallback for: decided like any other
        refusal (the judge failing for everyone on it holds)."""
        return replace(self, action=Action.HOLD_OR_CONFIRM, kind=f"judge_http_{self.status}")


def classify(exc: openai.OpenAIError | ValueError) -> Failure:
    """Map the SDK's exceptions onto what the worker does about them."""
    message = str(getattr(exc, "message", exc))[:300]
    if isinstance(exc, openai.APITimeoutError) and (refused := _connection_failure(exc)):
        return Failure(Action.RETRY, "judge_unreachable", str(refused)[:300])
    if isinstance(exc, openai.APITimeoutError):
        return Failure(Action.HOLD_OR_ERROR, "judge_timeout", "the judge did not answer in time")
    if isinstance(exc, openai.APIConnectionError):
        return Failure(Action.RETRY, "judge_unreachable", message)
    if isinstance(exc, openai.APIStatusError):
        return _classify_status(exc, message)
    # Malformed bodies (APIResponseValidationError, or the SDK's bare JSONDecodeError).
    return Failure(Action.RETRY, "judge_bad_response", message)


def _classify_status(exc: openai.APIStatusError, message: str) -> Failure:
    status = exc.status_code
    code = (exc.code or "").lower()
    text = message.lower()
    param = exc.param
    if status == 429 and code == "insufficient_quota":
        return Failure(Action.HOLD, "insufficient_quota", message, status, param, code=code)
    if status == 429 and ("request too large" in text or _above_limit(text)):
        # Larger than the whole tokens-per-minute limit: no wait makes it fit.
        return Failure(Action.ERROR, "request_too_large", message, status, param, code=code)
    if status == 429:
        return Failure(Action.WAIT, "judge_rate_limited", message, status, param,
                       _retry_after(exc), code=code or None)
    if status in (408, 409) or status >= 500:
        kind = f"judge_http_{status}"
        return Failure(Action.RETRY, kind, message, status, param, _retry_after(exc))
    if "context_length" in code or "context length" in text or "maximum context" in text:
        return Failure(Action.ERROR, "context_too_long", message, status, param)
    if "content_filter" in code or "content_policy" in code or "content management" in text:
        return Failure(Action.ERROR, "refused", message, status, param)
    if status in (400, 422) and (part := _refused_part(param, code, text)):
        return Failure(Action.RESHAPE, f"{part}_rejected", message, status, part)
    return Failure(Action.HOLD_OR_CONFIRM, f"judge_http_{status}", message, status, param)


def _above_limit(text: str) -> bool:
    """Does a 429 say the request asked for more than the whole limit?"""
    if (numbers := _LIMIT_REQUESTED.search(text)) is None:
        return False
    limit, requested = (int(n.replace(",", "")) for n in numbers.groups())
    return requested > limit


def _refused_part(param: str | None, code: str, text: str) -> str | None:
    """The part of the request's shape the endpoint refuses, if it names one (merely
    mentioning it is not refusing it: a gateway may echo the whole request body)."""
    if param == "response_format" or _FORMAT_REFUSED.search(text):
        return "response_format"
    named = _REFUSED_PART.search(text)
    if param in SHAPE_PARTS and (code in _UNSUPPORTED_CODES or named):
        return param
    if param is None and named and named.group(1) in SHAPE_PARTS:
        return named.group(1)  # servers that name it only in the message
    return None  # e.g. ``max_tokens`` too large for the model: a value, not the wording


def _connection_failure(exc: openai.APITimeoutError) -> BaseException | None:
    """The connection error behind a "timeout" that was none, if any.

    The SDK's aiohttp transport maps every ``aiohttp.ClientConnectionError`` (refused,
    reset, server disconnected) to ``httpx.ConnectTimeout``, so the SDK raises
    ``APITimeoutError`` for them; only a real timeout in the cause chain makes it one.
    """
    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, TimeoutError):  # aiohttp's own timeouts are TimeoutErrors too
            return None
        if isinstance(cause, aiohttp.ClientConnectionError):
            return cause
        cause = cause.__cause__
    return None


def _retry_after(exc: openai.APIStatusError) -> float | None:
    headers = exc.response.headers
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return min(MAX_RETRY_AFTER_S, max(0.0, float(ms) / 1000))
        if (seconds := headers.get("retry-after")) is not None:
            return min(MAX_RETRY_AFTER_S, max(0.0, float(seconds)))
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff
    return None
