"""OpenLLMetry (Traceloop) retriever spans: which spans retrieved, and the documents in their
output (pure).

OpenLLMetry records what a step returned as JSON text in ``traceloop.entity.output`` (and,
from its LangChain instrumentation since 2026, the same text in ``gen_ai.task.output``), with
``traceloop.span.kind`` (``task``, ``tool``, ``workflow``...) and ``traceloop.entity.name``. The
names are written here: their constants ship in ``opentelemetry-semantic-conventions-ai``
(``SpanAttributes.TRACELOOP_*``, ``GEN_AI_TASK_OUTPUT``), which the worker does not depend on.

What the output of a retrieving step looks like, by instrumentation:

- LangChain's retriever span (``vector_db_retrieve <name>``, ``gen_ai.operation.name``
  ``vector_db_retrieve``): ``{"documents": [{"page_content", "metadata"}], "count"}``;
- a LangChain chain that returned documents (before the retriever span existed, a retriever
  inside a chain had no span of its own): ``{"outputs": [Document], "kwargs"}``, each Document
  as LangChain serialises it, ``{"lc", "type": "constructor", "id": [..., "Document"],
  "kwargs": {"page_content", "metadata"}}``; a tool's ``{"output": ..., "kwargs"}``;
- LlamaIndex's retriever task: a list of ``NodeWithScore``, each ``{"node": {"text",
  "metadata"...}, "score"}`` (or that object as JSON text: ``to_json`` writes one);
- the SDK's ``@task`` / ``@tool`` decorators: whatever the function returned, as JSON.

An output is taken as documents only from a span that says it retrieved, or when its items
are documents beyond doubt: arbitrary task outputs (a list of strings, of ``{"text"}`` chunks,
of messages) are not the model's context. A span retrieved when its operation is
``vector_db_retrieve`` or its entity name names retrieval (``retrieve``, ``VectorStoreRetriever``,
``search_docs``...); then plain strings and ``{"content"}`` / ``{"text"}`` items count too. Items
that are documents beyond doubt (LangChain's ``page_content``, its serialised ``Document``, a
LlamaIndex node with text) count from any OpenLLMetry span.
"""

from __future__ import annotations

import re
from typing import Any, Final

from consumer.telemetry.attributes import json_value, text
from consumer.telemetry.returned_documents import document
from consumer.telemetry.spans import Span
from schemas.trace import Document

TRACELOOP_SPAN_KIND: Final = "traceloop.span.kind"
TRACELOOP_ENTITY_NAME: Final = "traceloop.entity.name"
TRACELOOP_ENTITY_OUTPUT: Final = "traceloop.entity.output"
GEN_AI_TASK_OUTPUT: Final = "gen_ai.task.output"
VECTOR_DB_RETRIEVE: Final = "vector_db_retrieve"  # GenAICustomOperationName.VECTOR_DB_RETRIEVE

# Where a step's output keeps its list: the retriever span's, a chain's, a tool's.
_LIST_KEYS = ("documents", "outputs", "output")
# Words of an entity name that say the step retrieved (split at _ . - spaces and camel case).
# "docs" and "documents" (get_docs, fetch_documents), not "document" (summarize_document).
_RETRIEVAL_WORDS = frozenset({"search", "vector", "vectorstore", "lookup", "knowledge", "docs",
                              "documents"})
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def is_traceloop(span: Span) -> bool:
    """True for a span OpenLLMetry made (it has a ``traceloop.span.kind``)."""
    return isinstance(span.attributes.get(TRACELOOP_SPAN_KIND), str)


def names_retrieval(span: Span) -> bool:
    """True when the span's operation is ``vector_db_retrieve`` or its entity name (else its
    span name) names retrieval."""
    if span.attributes.get("gen_ai.operation.name") == VECTOR_DB_RETRIEVE:
        return True
    name = text(span.attributes.get(TRACELOOP_ENTITY_NAME)) or span.name
    words = [word.lower() for word in _WORD.findall(name)]
    return any(word.startswith("retriev") or word in _RETRIEVAL_WORDS for word in words)


def output_documents(span: Span, *, retrieved: bool) -> list[Document]:
    """The documents with text in the span's output (``traceloop.entity.output``, else
    ``gen_ai.task.output``). ``retrieved``: the span is known to have retrieved, so strings and
    ``{"content"}`` / ``{"text"}`` items count; otherwise only items that are documents beyond
    doubt, and then only when every item is one."""
    output = json_value(span.attributes.get(TRACELOOP_ENTITY_OUTPUT))
    if output is None:
        output = json_value(span.attributes.get(GEN_AI_TASK_OUTPUT))
    items = _items(output)
    found = [doc for item in items if (doc := document(item, retrieved=retrieved)) is not None]
    if not retrieved and len(found) < len(items):
        return []  # a list that is partly something else is not a retriever's result
    return found


def _items(output: Any) -> list[Any]:
    if isinstance(output, dict):
        output = next((output[key] for key in _LIST_KEYS
                       if isinstance(output.get(key), list | tuple)), None)
    return list(output) if isinstance(output, list | tuple) else []
