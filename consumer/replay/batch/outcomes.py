"""A batch's output and error lines -> the results the synchronous judge gives (pure).

Each line is read as the synchronous path reads the same answer, so a batch replay publishes
the same verdicts:

- an answer (status 200): the ``ChatCompletion`` read by the judge's own reader; an
  ``Answered``, or the trace's ``refused`` error;
- an HTTP error (an error-file line with a status and OpenAI's error body): mapped by the
  judge's own failure map; an error that is the trace's own (context too long, a content
  filter, larger than the limit) is its ``TraceFailed``;
- anything the synchronous judge would try again, reword or hold on (a 5xx, a 429, a refused
  parameter, an unreadable or cut answer, a request that timed out, a batch that expired, was
  cancelled or failed): ``Unanswered``, with the batch's reason. The caller sends it through
  the synchronous judge, or publishes its ``as_failure()`` as an ``error`` verdict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeAlias

import httpx2
import openai
from openai.types.chat import ChatCompletion
from pydantic import ValidationError

from consumer.errors import JudgeError
from consumer.judge.attempts import cached_tokens, read_answer
from consumer.judge.failures import Action, classify
from consumer.judge.result import Answered, JudgeResult, TraceFailed
from consumer.replay.batch.requests import CHAT_COMPLETIONS_URL
from schemas.verdict import Usage

NO_TOKENS = Usage()
# The codes of lines that carry no HTTP response, as the synchronous path would name them.
_LINE_ERROR_KINDS = {"request_timeout": "judge_timeout"}


@dataclass(frozen=True, slots=True)
class Unanswered:
    """A request the batch did not answer for good, and the batch's reason."""

    custom_id: str
    kind: str  # batch_expired, batch_cancelled, batch_failed, judge_http_500, ...
    message: str
    # Tokens the batch spent on it: an unreadable answer's, else none (as the synchronous
    # judge counts a request that was sent: zero, not unknown).
    usage: Usage = NO_TOKENS

    def as_failure(self, latency_ms: int = 0) -> TraceFailed:
        """The ``error`` verdict's result, for a caller that does not retry it."""
        return TraceFailed(self.kind, self.message, self.usage, latency_ms, 1)


Outcome: TypeAlias = JudgeResult | Unanswered


@dataclass(frozen=True, slots=True)
class ReadLine:
    """One output or error line: whose it is and what it says."""

    custom_id: str
    outcome: Outcome


def read_result_line(text: str, latency_ms: int) -> ReadLine | None:
    """One line of an output or error file; None when it names no custom id (no request can
    be given its outcome; the runner treats that request as unanswered)."""
    try:
        line = json.loads(text)
    except ValueError:
        return None
    if not isinstance(line, dict) or not isinstance(line.get("custom_id"), str):
        return None
    custom_id: str = line["custom_id"]
    response = line.get("response")
    if isinstance(response, dict) and isinstance(response.get("status_code"), int):
        body = response.get("body")
        if response["status_code"] == 200:
            return ReadLine(custom_id, _answer(custom_id, body, latency_ms))
        return ReadLine(custom_id, _http_error(custom_id, response["status_code"], body,
                                                latency_ms))
    error = line["error"] if isinstance(line.get("error"), dict) else {}
    code = str(error.get("code") or "unknown")
    kind = _LINE_ERROR_KINDS.get(code, code if code.startswith("batch_") else f"batch_{code}")
    message = str(error.get("message") or f"the batch gave no answer ({code})")[:300]
    return ReadLine(custom_id, Unanswered(custom_id, kind, message))


def _answer(custom_id: str, body: Any, latency_ms: int) -> Outcome:
    try:
        completion = ChatCompletion.model_validate(body)
    except ValidationError:
        return Unanswered(custom_id, "judge_bad_response",
                          "the batch's answer is not a chat completion")
    usage = NO_TOKENS
    if completion.usage is not None:
        usage = Usage(
            prompt_tokens=completion.usage.prompt_tokens,
            completion_tokens=completion.usage.completion_tokens,
            total_tokens=completion.usage.total_tokens,
            cached_tokens=cached_tokens(completion.usage),
        )
    try:
        answer = read_answer(completion)
    except JudgeError as error:
        if error.kind == "refused":  # the synchronous path's error at once, too
            return TraceFailed(error.kind, error.message, usage, latency_ms, 1)
        # Unreadable, or cut by its token budget: the synchronous path asks again (with a
        # larger budget), so the batch's answer is not the last word.
        return Unanswered(custom_id, error.kind, error.message, usage)
    # The verdict names the model that answered, as the synchronous path's does.
    return Answered(answer, usage, latency_ms, 1, completion.model or None)


def _http_error(custom_id: str, status: int, body: Any, latency_ms: int) -> Outcome:
    """An error line mapped as the synchronous judge maps the same response."""
    failure = classify(_status_error(status, body))
    if failure.action is Action.ERROR:
        return TraceFailed(failure.kind, failure.message, NO_TOKENS, latency_ms, 1)
    return Unanswered(custom_id, failure.kind, failure.message)


def _status_error(status: int, body: Any) -> openai.APIStatusError:
    """The exception the SDK raises for this response, made as the SDK makes it: the same
    class, message (``Error code: N - message``) and error object (code, type, param)."""
    error = body.get("error", body) if isinstance(body, dict) else body
    message = error.get("message") if isinstance(error, dict) else None
    request = httpx2.Request("POST", f"https://batch.invalid{CHAT_COMPLETIONS_URL}")
    response = httpx2.Response(status, request=request)
    exception: type[openai.APIStatusError] = {
        400: openai.BadRequestError, 401: openai.AuthenticationError,
        403: openai.PermissionDeniedError, 404: openai.NotFoundError, 409: openai.ConflictError,
        422: openai.UnprocessableEntityError, 429: openai.RateLimitError,
    }.get(status, openai.InternalServerError if status >= 500 else openai.APIStatusError)
    text = f"Error code: {status}" + (f" - {message}" if isinstance(message, str) and message
                                      else "")
    return exception(text, response=response, body=error)
