"""A RAG handler on the OpenAI SDK: the toy retriever's three documents go in the system prompt.
Traced by ``--instrumentation``:

- ``openai-v2``: the OpenTelemetry project's own ``opentelemetry-instrumentation-openai-v2``,
  its content capture set by the team's environment (the test sets it):
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` and ``OTEL_SEMCONV_STABILITY_OPT_IN``;
- ``openllmetry``: traceloop's ``opentelemetry-instrumentation-openai`` (content on by default,
  ``TRACELOOP_TRACE_CONTENT``);
- ``openinference``: Arize's ``openinference-instrumentation-openai`` (content on by default,
  ``OPENINFERENCE_HIDE_INPUTS`` / ``OPENINFERENCE_HIDE_OUTPUTS`` hide it).

Runs in the instrumentation venv only (not type-checked in the project's).
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

import openai

from tests.instrumentations import telemetry
from tests.instrumentations.cases import chat_answer


class Instrumentor(Protocol):
    """What the instrumentors share (``BaseInstrumentor``)."""

    def instrument(self, **kwargs: Any) -> None: ...

    def uninstrument(self, **kwargs: Any) -> None: ...


def instrumentor(name: str) -> Instrumentor:
    """The chosen instrumentation's instrumentor, imported only when chosen."""
    if name == "openai-v2":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
        return OpenAIInstrumentor()  # type: ignore[no-untyped-call]  # its __init__
    if name == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as Traceloop
        return Traceloop()
    if name == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInference
        return OpenInference()
    raise SystemExit(f"unknown instrumentation {name!r}")


def main() -> None:
    [flag, name] = sys.argv[1:3]
    if flag != "--instrumentation":
        raise SystemExit("usage: openai_sdk --instrumentation NAME --model-url ... ")
    del sys.argv[1:3]
    args = telemetry.arguments(__doc__ or "")
    started = telemetry.start(args)
    chosen = instrumentor(name)
    chosen.instrument(tracer_provider=started.tracer_provider,
                      logger_provider=started.logger_provider)
    client = openai.OpenAI(base_url=args.model_url, api_key="sk-fake", max_retries=0)
    try:
        telemetry.ask_each(started, lambda case: chat_answer(client, case))
    finally:
        client.close()
        chosen.uninstrument()
        started.shutdown()


if __name__ == "__main__":
    main()
