"""A Pydantic AI agent answering from the question's three documents, traced by Pydantic AI's
own OpenTelemetry instrumentation, no logfire: the ``Instrumentation`` capability with
``InstrumentationSettings`` on the program's tracer provider (this release takes it as
``Agent(..., capabilities=[...])``; ``instrument=`` is gone); the model is ``OpenAIChatModel``
on the model's URL. The documents reach the model as the agent's instructions (a dynamic
``@agent.instructions`` function reading the run's dependencies: what the retriever found);
with ``--retrieve-tool``, as what the agent's ``retrieve`` tool returns when the model calls it
(the instructions then name the tool, and hold no document).

Runs in the instrumentation venv only (not type-checked in the project's).
"""

from __future__ import annotations

import sys

from pydantic_ai import Agent, InstrumentationSettings, RunContext
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.instrumentations import telemetry
from tests.instrumentations.cases import MODEL, TOOL_PROMPT, Case, context

RETRIEVE_TOOL = "--retrieve-tool"


def agent(model_url: str, settings: InstrumentationSettings,
          retrieve_tool: bool) -> Agent[Case, str]:
    """The agent: the documents of the case it runs for in its instructions, or returned by its
    ``retrieve`` tool."""
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=model_url,
                                                           api_key="sk-fake"))
    capabilities = [Instrumentation(settings=settings)]
    if retrieve_tool:
        retrieving: Agent[Case, str] = Agent(model, deps_type=Case, capabilities=capabilities,
                                             instructions=TOOL_PROMPT)

        @retrieving.tool
        def retrieve(ctx: RunContext[Case], query: str) -> list[str]:
            """The documents that answer ``query``, best first."""
            assert query == ctx.deps.question
            return list(ctx.deps.documents)

        return retrieving
    answering: Agent[Case, str] = Agent(model, deps_type=Case, capabilities=capabilities)

    @answering.instructions
    def documents(ctx: RunContext[Case]) -> str:
        return context(ctx.deps)

    return answering


def main() -> None:
    retrieve_tool = RETRIEVE_TOOL in sys.argv
    if retrieve_tool:
        sys.argv.remove(RETRIEVE_TOOL)
    args = telemetry.arguments(__doc__ or "")
    started = telemetry.start(args)
    answering = agent(args.model_url, InstrumentationSettings(
        tracer_provider=started.tracer_provider), retrieve_tool)
    try:
        telemetry.ask_each(
            started, lambda case: str(answering.run_sync(case.question, deps=case).output))
    finally:
        started.shutdown()


if __name__ == "__main__":
    main()
