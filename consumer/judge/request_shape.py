"""How a judge request is worded for one endpoint and model: a small immutable value (pure).

Endpoints differ in the parts of a chat-completions request they take: structured output
(``json_schema``, ``json_object``, or neither), the answer's token limit (``max_tokens``;
reasoning models want ``max_completion_tokens``, and older OpenAI-compatible servers know only
``max_tokens``) and ``temperature`` (reasoning models refuse any but the default). Each request
carries the ``RequestShape`` it was sent with. When the endpoint refuses a part by name, the
request is sent again in ``shape.without(part)`` (an answer cut by its token budget, in
``shape.raised()``); every step removes an option or raises the budget, so a request is
reworded a bounded number of times, and a concurrent failure can only move the judge's shape
further along (``merged``), never back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from consumer.judge.prompt import (
    ANSWER_JSON_SCHEMA,
    MAX_ANSWER_TOKENS,
    SYSTEM_PROMPT,
    estimate_tokens,
)

RESPONSE_FORMATS: tuple[str, ...] = ("json_schema", "json_object", "text")
TOKEN_LIMITS: tuple[str, ...] = ("max_tokens", "max_completion_tokens")
# The parts of a request a shape can drop or change, by the name an endpoint gives them.
SHAPE_PARTS = frozenset({"response_format", "temperature", *TOKEN_LIMITS})
# A reasoning model's completion tokens include its hidden reasoning: 400 would often be spent
# before the answer is written (an empty answer, ``finish_reason: length``). OpenAI advises
# room for thousands; the judge's answer itself stays short.
REASONING_ANSWER_TOKENS = 4_000
# Reasoning families by name: OpenAI's (o1, o3, o4-mini, gpt-5, gpt-5.1, ...; dated, behind a
# provider prefix such as ``openai/``, fine-tuned as ``ft:o4-mini-...:org::id``, or inside an
# Azure deployment name such as ``my-o3-deployment``) and other vendors' (DeepSeek's R1 /
# ``deepseek-reasoner``, Qwen's QwQ). The family must stand as its own word (``halo3`` and
# ``gpt-50`` are not one); ``-chat`` variants are chat models. A name this misses is found
# out by the endpoint: refusing ``max_tokens`` for ``max_completion_tokens``, or an answer cut
# by its budget (``finish_reason: length``), raises the budget (``without``, ``raised``).
_REASONING_MODEL = re.compile(
    r"(?:^|[/:_-])(?:o\d+|gpt-?5(?:\.\d+)?|deepseek-(?:r1|reasoner)|qwq)(?=$|[-_:](?!chat))",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class RequestShape:
    """The wording of a request: the parts sent besides the model and the messages."""

    response_format: str = "json_schema"  # one of RESPONSE_FORMATS; "text" sends none
    token_limits: tuple[str, ...] = TOKEN_LIMITS  # the first is sent, the rest are fallbacks
    temperature: bool = True  # send temperature 0
    answer_tokens: int = MAX_ANSWER_TOKENS

    def body(self, model: str, messages: list[dict[str, str]]) -> dict[str, Any]:
        """The request body, in wire form."""
        body: dict[str, Any] = {"model": model, "messages": messages}
        if self.temperature:
            body["temperature"] = 0
        if self.token_limits:
            body[self.token_limits[0]] = self.answer_tokens
        if self.response_format == "json_schema":
            body["response_format"] = {"type": "json_schema", "json_schema": ANSWER_JSON_SCHEMA}
        elif self.response_format == "json_object":
            body["response_format"] = {"type": "json_object"}
        return body

    def without(self, part: str) -> RequestShape | None:
        """The next wording once the endpoint refused ``part``; None if this shape did not
        send it (or has nothing left to fall back to)."""
        if part == "response_format":
            level = RESPONSE_FORMATS.index(self.response_format) + 1
            if level < len(RESPONSE_FORMATS):
                return replace(self, response_format=RESPONSE_FORMATS[level])
            return None
        if part == "temperature":
            return replace(self, temperature=False) if self.temperature else None
        if self.token_limits and self.token_limits[0] == part:
            rest = self.token_limits[1:]
            if part == "max_tokens" and rest[:1] == ("max_completion_tokens",):
                # Refused for ``max_completion_tokens``: a reasoning model, whatever its name.
                return replace(self, token_limits=rest, answer_tokens=REASONING_ANSWER_TOKENS)
            return replace(self, token_limits=rest)
        return None

    def raised(self) -> RequestShape | None:
        """The same wording with the reasoning model's answer budget, once an answer came
        back cut by the budget (``finish_reason: length``); None if it is that large already."""
        if self.answer_tokens >= REASONING_ANSWER_TOKENS:
            return None
        return replace(self, answer_tokens=REASONING_ANSWER_TOKENS)

    def merged(self, other: RequestShape) -> RequestShape:
        """Every fallback either shape has reached (both come from the same start)."""
        level = max(RESPONSE_FORMATS.index(s.response_format) for s in (self, other))
        return replace(
            self,
            response_format=RESPONSE_FORMATS[level],
            token_limits=min(self.token_limits, other.token_limits, key=len),
            temperature=self.temperature and other.temperature,
            answer_tokens=max(self.answer_tokens, other.answer_tokens),
        )


def minimum_request_tokens(model: str) -> int:
    """The fewest tokens one request to ``model`` is counted at: its first answer budget
    plus the system prompt (a trace's documents and answer come on top)."""
    return shape_for(model).answer_tokens + estimate_tokens(SYSTEM_PROMPT)


def shape_for(model: str) -> RequestShape:
    """The first wording for ``model``: reasoning families as they expect it from the first
    call; any other model (or an unknown deployment name) as chat models take it, reworded by
    the endpoint's first refusals."""
    if _REASONING_MODEL.search(model):
        return RequestShape(
            token_limits=tuple(reversed(TOKEN_LIMITS)),
            temperature=False,
            answer_tokens=REASONING_ANSWER_TOKENS,
        )
    return RequestShape()
