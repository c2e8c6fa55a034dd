"""What a step or a tool returned, read as documents: the shapes frameworks serialise theirs
in (pure).

An item is a document when it is a text, LangChain's ``{"page_content", "metadata"}`` (or its
serialised ``Document``, ``{"lc", "kwargs": {"page_content"...}}``), LlamaIndex's
``NodeWithScore`` (``{"node": {"text"...}, "score"}``, or that object as JSON text), or, from a
step known to have retrieved, any ``{"content"}`` / ``{"text"}`` object that is not a message.
OpenLLMetry's step outputs (``openllmetry.py``) and the results tools hand back to the model
(``tool_result_documents``) are read alike.
"""

from __future__ import annotations

from typing import Any

from consumer.telemetry.attributes import json_value, looks_like_json, text
from schemas.trace import Document

# A tool's result of more items than this is one document: the judge reads the first
# MAX_DOCUMENTS anyway, and a hostile list must not make a million of them.
MAX_TOOL_RESULT_ITEMS = 256


def document(item: Any, *, retrieved: bool) -> Document | None:
    """The item as a document, or None. ``retrieved``: it came from a step known to have
    retrieved, so strings and ``{"content"}`` / ``{"text"}`` objects count too."""
    if isinstance(item, str) and looks_like_json(item):
        # LlamaIndex's to_json: a node as JSON text (a text that merely opens with "[" stays)
        item = parsed if isinstance(parsed := json_value(item), dict) else item
    if isinstance(item, str):
        return Document(content=item) if retrieved and text(item) is not None else None
    if not isinstance(item, dict):
        return None
    kwargs = item.get("kwargs")
    if isinstance(kwargs, dict) and "page_content" in kwargs:  # LangChain's serialised Document
        item = kwargs
    node = item.get("node")
    if isinstance(node, dict):  # LlamaIndex's NodeWithScore
        return _with_content(node, text(node.get("text")), score=item.get("score"))
    if "page_content" in item:
        return _with_content(item, text(item.get("page_content")))
    if retrieved and "role" not in item:  # a message is not a document
        return _with_content(item, text(item.get("content")) or text(item.get("text")))
    return None


def tool_result_documents(result: str) -> list[Document]:
    """A tool's result as the documents it returned: a JSON list whose every item is a
    document (a retrieval tool's), item by item; anything else, the result whole."""
    data = json_value(result) if result.lstrip().startswith("[") else None
    if isinstance(data, list) and 0 < len(data) <= MAX_TOOL_RESULT_ITEMS:
        found = [document(item, retrieved=True) for item in data]
        if all(found):
            return [item for item in found if item is not None]
    return [Document(content=result)]


def _with_content(item: dict[str, Any], content: str | None, score: Any = None) -> Document | None:
    if content is None:
        return None
    metadata = json_value(item.get("metadata"))
    metadata = dict(metadata) if isinstance(metadata, dict) else {}
    if isinstance(score, int | float) and not isinstance(score, bool):
        metadata["score"] = score
    return Document(content=content, id=text(item.get("id") or item.get("id_")),
                    metadata=metadata or None)
