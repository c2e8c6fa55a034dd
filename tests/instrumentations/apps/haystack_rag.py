"""A Haystack RAG pipeline traced by OpenInference (Arize's ``openinference-instrumentation-
haystack``): an ``InMemoryDocumentStore`` holding every question's three documents, an
``InMemoryBM25Retriever`` (filtered to the question's documents, top 3), a ``ChatPromptBuilder``
pasting them into the system prompt, and an ``OpenAIChatGenerator`` on the model's URL. The
store scores with ``BM25Okapi``: the default ``BM25L`` drops a document that shares no word
with the question (the second document of "Who wrote Dune?"), and each question is to get
its three; they come best first, so not always in the case's order.

Haystack's own usage telemetry is off (``HAYSTACK_TELEMETRY_ENABLED``), as on a machine that
reaches nothing but the model; its own OTel auto-tracing is left as a team gets it.

Runs in the instrumentation venv only (not type-checked in the project's).
"""

from __future__ import annotations

import os

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

from haystack import Document, Pipeline  # after the switch: read at import
from haystack.components.builders import ChatPromptBuilder
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.dataclasses import ChatMessage
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.utils import Secret
from openinference.instrumentation.haystack import HaystackInstrumentor

from tests.instrumentations import telemetry
from tests.instrumentations.cases import CASES, MODEL, SYSTEM_PROMPT, Case

# The documents listed as ``cases.context`` lists them, in the retriever's order.
TEMPLATE = [
    ChatMessage.from_system(
        SYSTEM_PROMPT + "\n{% for doc in documents %}\n- {{ doc.content }}{% endfor %}"),
    ChatMessage.from_user("{{ question }}"),
]


def pipeline(model_url: str) -> Pipeline:
    """Retriever -> prompt builder -> generator, over a store of every case's documents."""
    store = InMemoryDocumentStore(bm25_algorithm="BM25Okapi")
    store.write_documents([
        Document(content=text, meta={"case": case.case_id, "id": f"{case.case_id}-{n}"})
        for case in CASES for n, text in enumerate(case.documents, start=1)])
    rag = Pipeline()
    rag.add_component("retriever", InMemoryBM25Retriever(store, top_k=3))
    rag.add_component("prompt_builder", ChatPromptBuilder(
        template=TEMPLATE, required_variables=["documents", "question"]))
    rag.add_component("llm", OpenAIChatGenerator(
        api_key=Secret.from_token("sk-fake"), model=MODEL, api_base_url=model_url,
        max_retries=0))
    rag.connect("retriever.documents", "prompt_builder.documents")
    rag.connect("prompt_builder.prompt", "llm.messages")
    return rag


def main() -> None:
    args = telemetry.arguments(__doc__ or "")
    started = telemetry.start(args)
    instrumentor = HaystackInstrumentor()
    instrumentor.instrument(tracer_provider=started.tracer_provider)
    rag = pipeline(args.model_url)
    try:
        def answer(case: Case) -> str:
            result = rag.run({
                "retriever": {"query": case.question, "filters": {
                    "field": "meta.case", "operator": "==", "value": case.case_id}},
                "prompt_builder": {"question": case.question},
            })
            [reply] = result["llm"]["replies"]
            return str(reply.text or "")

        telemetry.ask_each(started, answer)
    finally:
        instrumentor.uninstrument()
        started.shutdown()


if __name__ == "__main__":
    main()
