"""A LangChain RAG chain: a retriever (a ``BaseRetriever`` finding the question's three
documents) and ``ChatOpenAI``. Traced by ``--instrumentation``:

- ``openllmetry``: traceloop's ``opentelemetry-instrumentation-langchain`` and ``-openai``,
  instrumented as ``Traceloop.init`` does;
- ``openinference``: Arize's ``openinference-instrumentation-langchain`` (its callback handler
  traces every run: chain, retriever, prompt, LLM).

``--docs-in-prompt`` pastes the retrieved documents into the system prompt, as most RAG chains
do; without it the model sees only the question (the documents are retrieved to be shown as
sources), so the judge's context can only come from the retriever's span.

Runs in the instrumentation venv only (not type-checked in the project's).
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda, RunnableParallel, RunnablePassthrough
from langchain_openai import ChatOpenAI

from tests.instrumentations import telemetry
from tests.instrumentations.cases import BY_QUESTION, MODEL, SYSTEM_PROMPT

DOCS_IN_PROMPT = "--docs-in-prompt"


class Instrumentor(Protocol):
    """What the instrumentors share (``BaseInstrumentor``)."""

    def instrument(self, **kwargs: Any) -> None: ...

    def uninstrument(self, **kwargs: Any) -> None: ...


def instrumentors(name: str) -> tuple[Instrumentor, ...]:
    """The chosen instrumentation's instrumentors, imported only when chosen."""
    if name == "openllmetry":
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
        return LangchainInstrumentor(), OpenAIInstrumentor()
    if name == "openinference":
        from openinference.instrumentation.langchain import (
            LangChainInstrumentor as OpenInference,
        )
        return (OpenInference(),)
    raise SystemExit(f"unknown instrumentation {name!r}")


class ToyRetriever(BaseRetriever):
    """The three documents of the question asked (ids in the metadata), best first."""

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        case = BY_QUESTION[query]
        return [Document(page_content=text, metadata={"id": f"{case.case_id}-{n}"})
                for n, text in enumerate(case.documents, start=1)]


def messages(docs_in_prompt: bool) -> RunnableLambda[dict[str, object], list[BaseMessage]]:
    """The step that turns the retrieved documents and the question into the chat's messages."""

    def build(found: dict[str, object]) -> list[BaseMessage]:
        question = str(found["question"])
        documents = found["documents"]
        assert isinstance(documents, list)
        if docs_in_prompt:
            listed = "\n".join(f"- {doc.page_content}" for doc in documents)
            system = f"{SYSTEM_PROMPT}\n\n{listed}"
        else:
            system = "Answer the question in one sentence."
        return [SystemMessage(system), HumanMessage(question)]

    return RunnableLambda(build)


def main() -> None:
    [flag, name] = sys.argv[1:3]
    if flag != "--instrumentation":
        raise SystemExit("usage: langchain_rag --instrumentation NAME [--docs-in-prompt] ...")
    del sys.argv[1:3]
    docs_in_prompt = DOCS_IN_PROMPT in sys.argv
    if docs_in_prompt:
        sys.argv.remove(DOCS_IN_PROMPT)
    args = telemetry.arguments(__doc__ or "")
    started = telemetry.start(args)
    chosen = instrumentors(name)
    for instrumentor in chosen:
        instrumentor.instrument(tracer_provider=started.tracer_provider,
                                logger_provider=started.logger_provider)
    llm = ChatOpenAI(model=MODEL, base_url=args.model_url, api_key="sk-fake", max_retries=0)
    chain = (RunnableParallel(documents=ToyRetriever(), question=RunnablePassthrough())
             | messages(docs_in_prompt) | llm | StrOutputParser())
    try:
        telemetry.ask_each(started, lambda case: str(chain.invoke(case.question)))
    finally:
        for instrumentor in chosen:
            instrumentor.uninstrument()
        started.shutdown()


if __name__ == "__main__":
    main()
