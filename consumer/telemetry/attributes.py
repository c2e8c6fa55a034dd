"""Reading span attribute values the way the conventions write them (pure).

Attributes arrive from any producer, so every reader here tolerates the wrong type: a value
that is not what the convention says is treated as absent, never raised on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from consumer.telemetry.spans import Attributes

# Roles as the conventions and frameworks spell them (LangChain says human / ai, Gemini model).
USER_ROLES = frozenset({"user", "human"})
ASSISTANT_ROLES = frozenset({"assistant", "ai", "model"})
SYSTEM_ROLES = frozenset({"system", "developer"})
# A tool's result handed back to the model ("function": OpenAI's role before tools).
TOOL_ROLES = frozenset({"tool", "function"})

# Keys under which frameworks put the answer or the question in a JSON input/output value
# (LangChain's create_retrieval_chain: {"input", "context", "answer"}; RetrievalQA: "result").
OUTPUT_KEYS = ("answer", "output", "result", "response", "text", "content")
INPUT_KEYS = ("input", "question", "query", "text", "content", "message")


# A Python object's repr, not text: ``Name(field=...`` (pydantic's, a dataclass's, and LlamaIndex
# workflows' event summaries: ``StopEvent(result=AgentOutput(response=ChatMessage(...`` cut at
# 200 characters with "..."), or the default ``<module.Name object at 0x7f...>``. A repr escapes
# newlines, so it is one line; a name glued to its parenthesis and a keyword straight inside is
# what prose ("Yes (see the policy)") and code calls (``print(x=1)``) do not open with.
_KEYWORD_REPR = re.compile(r"[A-Z][A-Za-z0-9_]*\([A-Za-z_][A-Za-z0-9_]*=[^=].*(?:\)|\.\.\.)")
_DEFAULT_REPR = re.compile(r"<[A-Za-z_][A-Za-z0-9_.]* object(?: at 0x[0-9a-fA-F]+)?>")


def is_object_repr(value: str) -> bool:
    """True for a value that is a Python object's repr (``StopEvent(result=...)``,
    ``<Foo object at 0x...>``) rather than text written for a reader."""
    stripped = value.strip()
    return "\n" not in stripped and (_KEYWORD_REPR.fullmatch(stripped) is not None
                                     or _DEFAULT_REPR.fullmatch(stripped) is not None)


def indexed(attributes: Attributes, prefix: str) -> list[dict[str, Any]]:
    """The items of a flattened list (``prefix.N.rest``), in index order, each keyed by rest."""
    head = prefix + "."
    # Mapping asks a span for a dozen prefixes it mostly does not have: find the keys first
    # (a comprehension, no work per key beyond the test), and only then split them.
    keys = [key for key in attributes if key.startswith(head)]
    if not keys:
        return []
    groups: dict[int, dict[str, Any]] = {}
    start = len(head)
    for key in keys:
        index, dot, rest = key[start:].partition(".")
        # isascii: str.isdigit accepts digits such as "²" that int() refuses.
        if dot and index.isascii() and index.isdigit():
            groups.setdefault(int(index), {})[rest] = attributes[key]
    return [groups[i] for i in sorted(groups)]


def text(value: Any) -> str | None:
    """A string value, a number as its text; anything else (or blank) is None."""
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def json_value(value: Any) -> Any:
    """A JSON-encoded attribute decoded; a structured value as it is, an OTLP array (a tuple)
    as a list (the items inside it as they are: nested arrays stay tuples)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
            return None
    if isinstance(value, tuple):
        return list(value)
    return value


def json_text(value: Any) -> str | None:
    """An attribute holding JSON text or a structure, as JSON text (for tool arguments)."""
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, Mapping | tuple | list):
        return json.dumps(value, default=str, ensure_ascii=False)
    return text(value)


def value_text(
    value: Any, *, is_json: bool, keys: Sequence[str], roles: frozenset[str]
) -> str | None:
    """The text an ``input.value`` / ``output.value`` carries.

    Plain text is taken as it is. JSON (by mime type, or as Langfuse always writes) is read:
    a string; the first of ``keys`` holding text; a one-entry object; a chat message list (or
    ``{"messages": [...]}``, as LangGraph writes) by its last message of ``roles``. JSON with
    none of these (a raw API response) is None: the next rule of the precedence decides.
    """
    raw = text(value)
    if raw is None or not is_json:
        return raw
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # "[" * 2000 is 2 kB, too deep for the parser
        return raw  # plain text labelled JSON: still the producer's text
    return _structured_text(data, keys, roles)


def looks_like_json(value: Any) -> bool:
    """True for a string that opens a JSON object or array (a producer that wrote no mime)."""
    return isinstance(value, str) and value.lstrip()[:1] in ("{", "[")


def _structured_text(data: Any, keys: Sequence[str], roles: frozenset[str]) -> str | None:
    if isinstance(data, str):
        return text(data)
    if isinstance(data, list):
        return last_message_text(data, roles)
    if not isinstance(data, dict):
        return None
    for key in keys:
        if (found := text(data.get(key))) is not None:
            return found
    if isinstance(data.get("messages"), list):
        return last_message_text(data["messages"], roles)
    if len(data) == 1:
        return text(next(iter(data.values())))
    return None


def last_message_text(messages: Sequence[Any], roles: frozenset[str]) -> str | None:
    """The content of the last ``{"role", "content"}`` message of one of ``roles``."""
    for message in reversed(messages):
        if isinstance(message, dict) and _role(message) in roles:
            found = content_text(message.get("content"))
            if found is not None:
                return found
    return None


def content_text(content: Any) -> str | None:
    """A message's content: a string, or the text of its list of parts."""
    return parts_text(content) if isinstance(content, list | tuple) else text(content)


def parts_text(parts: Sequence[Any]) -> str | None:
    """The text parts of a message's content list, joined (GenAI parts, OpenAI content): a
    JSON list, or an OTLP array (a tuple) of key-value lists."""
    texts = [
        found for part in parts if isinstance(part, dict) and part.get("type") == "text"
        and (found := text(part.get("content", part.get("text")))) is not None
    ]
    return "\n".join(texts) if texts else None


def _role(message: Mapping[str, Any]) -> str | None:
    role = message.get("role", message.get("type"))  # LangChain serialises a message's type
    return role.lower() if isinstance(role, str) else None
