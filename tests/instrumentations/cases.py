"""The five questions every program asks, each with its three documents and the model's reply.

Standard library only: the programs import it in the instrumentation venv, the test (and its
stand-in model, which answers each question with its ``answer``) in the project's venv.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MODEL = "gpt-4o-mini"
SYSTEM_PROMPT = "Answer the question from the documents only."
# A program whose model retrieves through a tool: the instructions name the tool instead.
TOOL_PROMPT = "Answer the question from the documents the retrieve tool finds only."


@dataclass(frozen=True, slots=True)
class Case:
    """One question, the three documents the toy retriever finds for it, and the reply."""

    case_id: str
    question: str
    documents: tuple[str, str, str]
    answer: str  # what the stand-in model replies; a [[score=N]] marker scores it for the judge


CASES = (
    Case("eiffel", "When was the Eiffel Tower completed?", (
        "The Eiffel Tower was completed in March 1889.",
        "It was built for the 1889 World's Fair in Paris.",
        "The tower is about 330 metres tall.",
    ), "The Eiffel Tower was completed in 1889."),
    Case("dune", "Who wrote Dune?", (
        "Dune is a 1965 science fiction novel by Frank Herbert.",
        "It won the Hugo Award in 1966.",
        "Dune is set on the desert planet Arrakis.",
    ), "Frank Herbert wrote Dune."),
    Case("everest", "How high is Mount Everest?", (
        "Mount Everest is 8,849 metres above sea level.",
        "It lies on the border of Nepal and China.",
        "Its first confirmed ascent was in 1953.",
    ), "Mount Everest is 12,000 metres high. [[score=1]]"),
    Case("python", "Who created Python?", (
        "Python was created by Guido van Rossum.",
        "Its first release was in 1991.",
        "It is named after Monty Python.",
    ), "Guido van Rossum created Python."),
    Case("light", "How fast is light?", (
        "Light travels at 299,792,458 metres per second in a vacuum.",
        "That is about 300,000 kilometres per second.",
        "Nothing with mass can reach that speed.",
    ), "Light travels at about 300,000 km per second. [[score=4]]"),
)
BY_QUESTION = {case.question: case for case in CASES}


def context(case: Case) -> str:
    """The documents as a program pastes them into its system prompt."""
    return SYSTEM_PROMPT + "\n\n" + "\n".join(f"- {text}" for text in case.documents)


def report(case: Case, trace_id: str, answer: str) -> str:
    """The line a program prints for each question: what the test matches verdicts to."""
    return json.dumps({"case": case.case_id, "trace_id": trace_id, "answer": answer})


def chat_answer(client: Any, case: Case) -> str:
    """The case asked of an OpenAI SDK client (whichever version a venv holds), the documents
    in the system prompt: the reply's text."""
    reply = client.chat.completions.create(model=MODEL, messages=[
        {"role": "system", "content": context(case)},
        {"role": "user", "content": case.question},
    ])
    return str(reply.choices[0].message.content or "")
