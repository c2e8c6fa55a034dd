"""The demo's RAG service as the OpenTelemetry project's own GenAI instrumentation traces it:
``opentelemetry-instrumentation-openai-v2`` capturing content its default way
(``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``).

The requests of ``scripts/rag_spans.py``, but no span carries content. The chat call is a
``chat gpt-4o-mini`` span with the model, the token counts and the finish reason; its messages
are log records of that span, emitted with the OTel SDK's logs API (``event_name`` set, the
body holding the content):

    POST /chat                      HTTP server root, no GenAI content
      SELECT embeddings             database (the vector store): the retrieval, no content
      chat gpt-4o-mini              gen_ai.operation.name chat; its log records:
                                      gen_ai.system.message  the instructions and documents
                                      gen_ai.user.message    the question
                                      gen_ai.choice          the reply (index, finish_reason)
        POST                        HTTP client call to the model's API
      INSERT chat_log               database

The service retrieves with code of its own, which the instrumentation does not trace, and
puts the documents in the system prompt: the worker judges the answer against the prompt
(``context_source: llm_input``). At start it embeds its documents: one ``embeddings`` span, a
GenAI span with nothing answered. The health checks and plain API calls are the same.

The log records go to the collector's logs pipeline and on to the logs topic, read by the
worker with ``OTLP_LOGS_TOPIC``: without it these traces have no answer (docs/instrumentations.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry._logs import Logger
from opentelemetry.context import Context
from opentelemetry.semconv.attributes import http_attributes, server_attributes
from opentelemetry.trace import SpanKind, Tracer, set_span_in_context

from scripts.rag_spans import (
    MODEL,
    AnsweredTrace,
    EmittedTraffic,
    RagRequest,
    RetrievedDocument,
    database,
    emit_traffic,
    hex_span_id,
    hex_trace_id,
    http_client,
    http_server,
)

INSTRUMENTATION_SCOPE = "opentelemetry.instrumentation.openai_v2"  # the instrumentation's own
EMBEDDING_MODEL = "text-embedding-3-small"
RESPONSE_MODEL = "gpt-4o-mini-2024-07-18"
SYSTEM_PROMPT = ("Answer the question from the documents below only. If they do not say, "
                 "say that you do not know.")
# Every event of the instrumentation names the provider (semantic conventions up to 1.36).
_EVENT_ATTRIBUTES = {"gen_ai.system": "openai"}
_API: dict[str, Any] = {server_attributes.SERVER_ADDRESS: "api.openai.com",
                        server_attributes.SERVER_PORT: 443}


def system_prompt(documents: Sequence[RetrievedDocument]) -> str:
    """The instructions with the retrieved documents, as the service sends them."""
    listed = "\n\n".join(f"Document {doc.id}:\n{doc.content}" for doc in documents)
    return f"{SYSTEM_PROMPT}\n\n{listed}" if documents else SYSTEM_PROMPT


@dataclass(frozen=True, slots=True)
class OpenAIv2Service:
    """The service's GenAI work as openai-v2 traces it: spans on the tracer it is given, the
    messages as log records through ``logger`` (``INSTRUMENTATION_SCOPE``)."""

    logger: Logger

    def emit_traffic(self, tracer: Tracer, requests: Sequence[RagRequest], *,
                     plain_every: int = 5) -> EmittedTraffic:
        """The service's life (``rag_spans.emit_traffic``), its GenAI calls traced this way."""
        return emit_traffic(tracer, requests, plain_every=plain_every,
                            answer=self.answer_request, build=self.build_index)

    def answer_request(self, tracer: Tracer, request: RagRequest) -> AnsweredTrace:
        """One ``POST /chat``: the retrieval query, the chat call and its log records; the
        chat span answers."""
        system = system_prompt(request.documents)
        with http_server(tracer, "POST", "/chat") as root:
            database(tracer, "SELECT", "embeddings",
                     "SELECT id, content FROM embeddings ORDER BY vector <=> $1 LIMIT 5")
            with tracer.start_as_current_span(f"chat {MODEL}", kind=SpanKind.CLIENT,
                                              attributes=_chat_request()) as chat:
                # The request's messages are logged as the call starts, the choice as it ends.
                context = set_span_in_context(chat)
                self._event(context, "gen_ai.system.message", {"content": system})
                self._event(context, "gen_ai.user.message", {"content": request.question})
                http_client(tracer, "POST", "https://api.openai.com/v1/chat/completions")
                chat.set_attributes(_chat_response(request, system))
                self._event(context, "gen_ai.choice", {
                    "index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": request.answer}})
            root.set_attribute(http_attributes.HTTP_RESPONSE_STATUS_CODE, 200)
            database(tracer, "INSERT", "chat_log",
                     "INSERT INTO chat_log (session_id, question, answer) VALUES ($1, $2, $3)")
        return AnsweredTrace(hex_trace_id(root), hex_span_id(chat), request)

    def build_index(self, tracer: Tracer, documents: Sequence[RetrievedDocument]) -> list[str]:
        """The documents embedded at start: one ``embeddings`` call (no log records: the
        instrumentation logs no content of an embeddings call); its trace id."""
        tokens = sum(len(doc.content) for doc in documents) // 4
        with tracer.start_as_current_span(f"embeddings {EMBEDDING_MODEL}", kind=SpanKind.CLIENT,
                                          attributes={
            "gen_ai.operation.name": "embeddings", "gen_ai.system": "openai",
            "gen_ai.request.model": EMBEDDING_MODEL, "gen_ai.response.model": EMBEDDING_MODEL,
            "gen_ai.usage.input_tokens": tokens, **_API,
        }) as embedding:
            http_client(tracer, "POST", "https://api.openai.com/v1/embeddings")
        return [hex_trace_id(embedding)]

    def _event(self, context: Context, name: str, body: dict[str, Any]) -> None:
        self.logger.emit(event_name=name, context=context, attributes=_EVENT_ATTRIBUTES,
                         body=body)


def _chat_request() -> dict[str, Any]:
    return {"gen_ai.operation.name": "chat", "gen_ai.system": "openai",
            "gen_ai.request.model": MODEL, "gen_ai.request.temperature": 0.1, **_API}


def _chat_response(request: RagRequest, system: str) -> dict[str, Any]:
    prompt_tokens = (len(system) + len(request.question)) // 4  # about four characters a token
    return {
        "gen_ai.response.model": RESPONSE_MODEL,
        "gen_ai.response.id": f"chatcmpl-{request.request_id}",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.usage.input_tokens": prompt_tokens,
        "gen_ai.usage.output_tokens": len(request.answer) // 4,
    }
