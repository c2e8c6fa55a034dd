"""What a chat-completions server answers, in OpenAI's shapes: completions and errors (pure).

A ``Responder`` turns one request body into a ``Reply``; ``consumer.localjudge.server``
sends it. The local judge and the tests' fake judges are responders. ``is_probe`` tells the
worker's health probe from a scoring request.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from consumer.judge.prompt import PROBE_MESSAGES


@dataclass(frozen=True, slots=True)
class Reply:
    """What to answer: a dict body is sent as JSON, a str raw (still as ``application/json``)."""

    status: int = 200
    body: dict[str, Any] | str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    hang: bool = False  # answer nothing until the client disconnects or the server stops


class Responder(Protocol):
    """Answers one chat-completions request body, without blocking (it runs on the loop)."""

    def __call__(self, request: dict[str, Any]) -> Reply: ...


def completion(
    content: str | None,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    refusal: str | None = None,
) -> dict[str, Any]:
    """A valid ``chat.completion`` body with one choice."""
    message = {"role": "assistant", "content": content, "refusal": refusal}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def error_body(
    message: str,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
) -> dict[str, Any]:
    """An error body in OpenAI's shape."""
    return {"error": {"message": message, "type": type_, "code": code, "param": param}}


def error_reply(
    status: int,
    message: str,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """An error ``Reply`` in OpenAI's shape."""
    return Reply(status=status, body=error_body(message, type_, code, param), headers=headers or {})


def is_probe(messages: object) -> bool:
    """Are these the worker's health-probe messages (``PROBE_MESSAGES``)?"""
    if not isinstance(messages, list):
        return False

    def pairs(items: list[Any]) -> list[tuple[Any, Any]]:
        return [(m.get("role"), m.get("content")) for m in items if isinstance(m, dict)]

    return pairs(messages) == pairs(list(PROBE_MESSAGES))
