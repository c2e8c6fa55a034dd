"""``ScriptedJudge``: a fake LLM judge scripted by markers in the answer it is asked to judge.

Put a marker in a trace's ``output`` and the judge behaves accordingly for that trace:

    (no marker)                    a valid verdict, score 5
    [[score=N]]                    a valid verdict with score N (out-of-range N is sent as is)
    [[status=500]]                 HTTP 500 on every attempt (any status; error body per status)
    [[status=429 retry_after=2]]   429 with ``Retry-After: 2``
    [[fail=2 status=503]]          503 on the first 2 attempts at this answer text, then a verdict
    [[garbage]]                    200 whose message content is not JSON
    [[malformed]]                  200 whose HTTP body is not JSON at all
    [[hang]]                       never answers (until the client gives up or the server stops)
    [[delay=0.3]]                  answers 0.3 s late
    [[refuse]]                     a refusal: ``refusal`` set, ``content`` null
    [[cached=N]]                   a verdict whose usage says N prompt tokens came from the
                                   provider's cache (``prompt_tokens_details.cached_tokens``)
    [[context_length]]             400 ``context_length_exceeded``, as OpenAI sends it
    [[too_large]]                  429 "Request too large ... tokens per min", as OpenAI sends it
    [[over_limit]]                 429 "Rate limit reached ... Limit 30000, Used 1200, Requested
                                   45000": a request larger than the whole limit, worded as a
                                   rate limit
    [[echo_400]]                   400 whose message echoes the request body (a gateway's
                                   policy block): it names ``response_format`` and refuses none

Markers combine (``[[fail=1 status=500]] [[score=2]]``). Attempts are counted per answer text.
A request without a ``groundedness@v1`` data block is a health probe: ``{"ok": true}``.
Knobs for every request, settable while serving (plain attribute stores are atomic):
``latency_s``, ``outage`` (a status, or a whole ``Reply``, for everything, probes included),
``retry_after_s`` (a ``Retry-After`` on outage and ``fail_every_nth`` answers),
``reject_json_schema``, ``rejected_formats`` (``response_format`` types refused),
``refused_params`` (request parameters the model refuses, with OpenAI's own error bodies: see
``PARAM_REJECTIONS``), ``fail_every_nth = (n, status)`` (every n-th scoring request fails) and
``reasoning_tokens`` (a reasoning model: it spends that many completion tokens thinking, so a
budget, ``max_completion_tokens`` or ``max_tokens``, not above it gets an empty answer with
``finish_reason: length``, as OpenAI's reasoning models do) and ``account_headers`` (headers
on every reply, errors included: an account's ``x-ratelimit-*``, as OpenAI sends them).
Every request is recorded.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from consumer.judge.prompt import read_data
from consumer.localjudge.replies import Reply, completion, error_reply

PROBE = "probe"
_MARKER = re.compile(r"\[\[([^\[\]]*)\]\]")
JSON_SCHEMA_REJECTED = (
    "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."
)
CONTEXT_LENGTH_MESSAGE = (
    "This model's maximum context length is 128000 tokens. However, your messages resulted in "
    "131072 tokens. Please reduce the length of the messages."
)
REQUEST_TOO_LARGE = (
    "Request too large for gpt-4o-mini in organization org-xxx on tokens per min (TPM): "
    "Limit 200000, Requested 250000. The input or output tokens must be reduced in order to "
    "run successfully."
)
OVER_LIMIT = (
    "Rate limit reached for gpt-4o-mini in organization org-xxx on tokens per min (TPM): "
    "Limit 30000, Used 1200, Requested 45000. Please try again in 1m32s."
)
# What OpenAI answers a model that does not take a parameter (reasoning models: max_tokens,
# temperature other than 1), and what an older OpenAI-compatible server says of one it does
# not know (max_completion_tokens): (message, code, param), all with HTTP 400.
PARAM_REJECTIONS: dict[str, tuple[str, str | None, str | None]] = {
    "max_tokens": (
        "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
        "'max_completion_tokens' instead.", "unsupported_parameter", "max_tokens"),
    "temperature": (
        "Unsupported value: 'temperature' does not support 0 with this model. Only the default "
        "(1) value is supported.", "unsupported_value", "temperature"),
    "max_completion_tokens": (
        "Unrecognized request argument supplied: max_completion_tokens", None, None),
}
_ERRORS: dict[int, tuple[str, str, str | None]] = {
    400: ("invalid_request_error", "Invalid request.", None),
    401: ("invalid_request_error", "Incorrect API key provided: sk-***.", "invalid_api_key"),
    403: ("request_forbidden", "Country, region, or territory not supported",
          "unsupported_country_region_territory"),
    404: ("invalid_request_error", "The model does not exist.", "model_not_found"),
    429: ("requests", "Rate limit reached for requests. Please try again.", "rate_limit_exceeded"),
    503: ("server_error", "The engine is currently overloaded, please try again later.", None),
}
_SERVER_ERROR = ("server_error", "The server had an error while processing your request.", None)


@dataclass(frozen=True, slots=True)
class Call:
    """One request the judge received, and the status it answered (None: no answer)."""

    at: float  # time.monotonic()
    model: str | None
    response_format: str | None  # response_format.type, or None when absent
    answer: str  # the answer text judged, or "probe"
    status: int | None
    request: dict[str, Any]


def markers(text: str) -> dict[str, str]:
    """The ``[[key=value flag]]`` markers in ``text``; a bare flag maps to ``""``."""
    found: dict[str, str] = {}
    for group in _MARKER.findall(text):
        for item in group.split():
            key, _, value = item.partition("=")
            found[key] = value
    return found


def status_reply(status: int, retry_after: str | None = None) -> Reply:
    """An error reply as OpenAI sends it for ``status``, with ``Retry-After`` if given."""
    type_, message, code = _ERRORS.get(status, _SERVER_ERROR)
    headers = {"Retry-After": retry_after} if retry_after else {}
    return error_reply(status, message, type_, code, headers=headers)


class ScriptedJudge:
    """A ``Responder`` scripted by markers in the answer text and by global knobs."""

    def __init__(self) -> None:
        self.latency_s = 0.0
        self.outage: int | Reply | None = None
        self.retry_after_s: float | None = None
        self.reject_json_schema = False
        self.rejected_formats: frozenset[str] = frozenset()
        self.refused_params: frozenset[str] = frozenset()
        self.fail_every_nth: tuple[int, int] | None = None
        self.reasoning_tokens: int | None = None
        self.account_headers: dict[str, str] = {}
        self._lock = threading.Lock()
        self._calls: list[Call] = []
        self._attempts: Counter[str] = Counter()
        self._scoring_requests = 0

    def __call__(self, request: dict[str, Any]) -> Reply:
        """Answer one chat-completions request."""
        answer = _answer_of(request)
        response_format = request.get("response_format")
        format_type = response_format.get("type") if isinstance(response_format, dict) else None
        with self._lock:
            reply = self._decide(request, answer, format_type)
            status = None if reply.hang else reply.status
            model = request.get("model")
            call = Call(time.monotonic(), model, format_type, answer, status, request)
            self._calls.append(call)
        extra_s = float(markers(answer).get("delay") or 0) if answer != PROBE else 0.0
        delay_s = reply.delay_s + self.latency_s + extra_s
        headers = {**self.account_headers, **reply.headers}
        return Reply(reply.status, reply.body, headers, delay_s, reply.hang)

    def _decide(self, request: dict[str, Any], answer: str, format_type: str | None) -> Reply:
        retry_after = None if self.retry_after_s is None else f"{self.retry_after_s:g}"
        if isinstance(self.outage, Reply):
            return self.outage
        if self.outage is not None:
            return status_reply(self.outage, retry_after)
        for param in PARAM_REJECTIONS:  # a model refuses a parameter whatever the prompt
            sent = param in request and not (param == "temperature" and request[param] == 1)
            if sent and param in self.refused_params:
                message, code, named = PARAM_REJECTIONS[param]
                return error_reply(400, message, code=code, param=named)
        if format_type in self.rejected_formats or (
            self.reject_json_schema and format_type == "json_schema"
        ):
            message = JSON_SCHEMA_REJECTED.replace("json_schema", str(format_type))
            return error_reply(400, message, param="response_format")
        if answer == PROBE:
            return self._completion(request, '{"ok": true}')
        self._scoring_requests += 1
        self._attempts[answer] += 1
        if self.fail_every_nth and self._scoring_requests % self.fail_every_nth[0] == 0:
            return status_reply(self.fail_every_nth[1], retry_after)
        found = markers(answer)
        status = int(found.get("status") or 500)
        if "status" in found and "fail" not in found:
            return status_reply(status, found.get("retry_after"))
        if self._attempts[answer] <= int(found.get("fail") or 0):
            return status_reply(status, found.get("retry_after"))
        if "hang" in found:
            return Reply(hang=True)
        if "malformed" in found:
            return Reply(body='{"id": "chatcmpl-cut", "object": "chat.completion", "choices": [')
        if "garbage" in found:
            return self._completion(request, "Sure! The answer looks well supported to me.")
        if "refuse" in found:
            refusal = "I'm sorry, but I can't help with that request."
            return Reply(body=completion(None, _model(request), 0, 12, refusal=refusal))
        if "context_length" in found:
            code = "context_length_exceeded"
            return error_reply(400, CONTEXT_LENGTH_MESSAGE, code=code, param="messages")
        if "too_large" in found:
            return error_reply(429, REQUEST_TOO_LARGE, "tokens", "rate_limit_exceeded")
        if "over_limit" in found:
            return error_reply(429, OVER_LIMIT, "tokens", "rate_limit_exceeded")
        if "echo_400" in found:
            echoed = json.dumps({k: v for k, v in request.items() if k != "messages"})
            return error_reply(400, f"Blocked by policy: {echoed[:300]}")
        budget = request.get("max_completion_tokens") or request.get("max_tokens")
        if self.reasoning_tokens is not None and (budget or 0) <= self.reasoning_tokens:
            return self._cut_by_length(request, int(budget or 0))
        score = int(found.get("score") or 5)
        claims = [] if score >= 4 else [_MARKER.sub("", answer).strip()]
        verdict = {
            "score": score,
            "reason": f"scripted verdict {score}",
            "unsupported_claims": claims,
        }
        return self._completion(request, json.dumps(verdict), int(found.get("cached") or 0))

    @staticmethod
    def _completion(request: dict[str, Any], content: str, cached: int = 0) -> Reply:
        prompt_tokens = len(json.dumps(request.get("messages", ""))) // 4
        body = completion(content, _model(request), prompt_tokens, len(content) // 4)
        if cached:
            body["usage"]["prompt_tokens_details"] = {"cached_tokens": min(cached, prompt_tokens)}
        return Reply(body=body)

    @staticmethod
    def _cut_by_length(request: dict[str, Any], budget: int) -> Reply:
        """The whole budget spent reasoning: no answer written, ``finish_reason: length``."""
        prompt_tokens = len(json.dumps(request.get("messages", ""))) // 4
        body = completion("", _model(request), prompt_tokens, budget)
        body["choices"][0]["finish_reason"] = "length"
        return Reply(body=body)

    @property
    def calls(self) -> list[Call]:
        """Every request received so far, oldest first."""
        with self._lock:
            return list(self._calls)

    def calls_for(self, text: str) -> list[Call]:
        """The requests whose answer contains ``text`` (``"probe"`` for probes)."""
        return [c for c in self.calls if text in c.answer]

    def count(self, text: str | None = None) -> int:
        """How many requests were received (whose answer contains ``text``, if given)."""
        return len(self.calls if text is None else self.calls_for(text))

    def gaps_s(self, text: str) -> list[float]:
        """Seconds between consecutive requests for the answers containing ``text``."""
        times = [c.at for c in self.calls_for(text)]
        return [later - earlier for earlier, later in pairwise(times)]

    def reset(self) -> None:
        """Forget the recorded requests and the per-answer attempt counts (knobs stay)."""
        with self._lock:
            self._calls.clear()
            self._attempts.clear()
            self._scoring_requests = 0


def _answer_of(request: dict[str, Any]) -> str:
    messages = request.get("messages")
    try:
        data = read_data(messages if isinstance(messages, list) else [])
    except ValueError:
        return PROBE
    return str(data.get("answer", ""))


def _model(request: dict[str, Any]) -> str:
    return str(request.get("model") or "scripted-judge")
