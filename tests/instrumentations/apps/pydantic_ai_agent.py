"""A Pydantic AI agent answering from the question's three documents, traced by Pydantic AI's
own OpenTelemetry instrumentation, no logfire: the ``Instrumentation`` capability with
``InstrumentationSettings`` on the program's tracer provider (this release takes it as
``Agent(..., capabilities=[...])``; ``instrument=`` is gone). The documents reach the model as
the agent's instructions (a dynamic ``@agent.instructions`` function reading the run's
dependencies: what the retriever found); the model is ``OpenAIChatModel`` on the model's URL.

Runs in the instrumentation venv only (not type-checked in the project's).
"""

from __future__ import annotations

from pydantic_ai import Agent, InstrumentationSettings, RunContext
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.instrumentations import telemetry
from tests.instrumentations.cases import CASES, MODEL, Case, context, report


def agent(model_url: str, settings: InstrumentationSettings) -> Agent[Case, str]:
    """The agent, its instructions the documents of the case it runs for."""
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=model_url,
                                                           api_key="sk-fake"))
    answering: Agent[Case, str] = Agent(
        model, deps_type=Case, capabilities=[Instrumentation(settings=settings)])

    @answering.instructions
    def documents(ctx: RunContext[Case]) -> str:
        return context(ctx.deps)

    return answering


def main() -> None:
    args = telemetry.arguments(__doc__ or "")
    started = telemetry.start(args)
    answering = agent(args.model_url, InstrumentationSettings(
        tracer_provider=started.tracer_provider))
    try:
        for case in CASES:
            with telemetry.request_span(started, case.question) as trace_id:
                result = answering.run_sync(case.question, deps=case)
            print(report(case, trace_id, result.output), flush=True)
    finally:
        started.shutdown()


if __name__ == "__main__":
    main()
