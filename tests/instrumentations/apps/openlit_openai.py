"""A RAG handler on the OpenAI SDK traced by OpenLIT (``openlit.init()``: it finds the
program's tracer and logger providers already set and reuses them, and instruments every
library it supports that is installed, the OpenAI SDK among them; content capture on by
default). The toy retriever's three documents go in the system prompt. Metrics off: the
collector has no metrics pipeline. Its model prices come from the file beside the programs
(``pricing_json``): by default it fetches them from the internet at start.

Runs in the second instrumentation venv only (OpenLIT needs an OpenAI SDK older than the
first venv's; not type-checked in the project's).
"""

from __future__ import annotations

from pathlib import Path

import openai
import openlit  # type: ignore[import-untyped]  # it ships no py.typed

from tests.instrumentations import telemetry
from tests.instrumentations.cases import chat_answer

PRICING = Path(__file__).resolve().parents[1] / "openlit-pricing.json"


def main() -> None:
    args = telemetry.arguments(__doc__ or "")
    started = telemetry.start(args)
    openlit.init(service_name=args.service, disable_metrics=True, pricing_json=str(PRICING))
    client = openai.OpenAI(base_url=args.model_url, api_key="sk-fake", max_retries=0)
    try:
        telemetry.ask_each(started, lambda case: chat_answer(client, case))
    finally:
        client.close()
        started.shutdown()


if __name__ == "__main__":
    main()
