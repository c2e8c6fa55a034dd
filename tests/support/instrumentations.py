"""The RAG programs of ``tests/instrumentations`` from the tests: their venvs (each built with
its make target when missing or stale), the setups (a program, its venv, its arguments and the
team's environment), one run of a setup, and the stand-in model they call.

The programs run in ``.venv-instrumentations`` (or, where their instrumentation's pins conflict
with that venv's, ``.venv-instrumentations-2``) as subprocesses, from the repo's root, and print
one JSON line per question (``tests.instrumentations.cases.report``): the trace id and the
answer the program got.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from consumer.localjudge.replies import Reply, completion
from consumer.localjudge.server import JudgeServer
from tests.instrumentations.cases import BY_QUESTION, MODEL, Case

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 900.0  # a cold pip cache downloads LangChain, Haystack and the OTel packages
RUN_TIMEOUT_S = 120.0
# The instrumentations' own variables: a developer's shell must not change what a setup runs.
_THEIRS = ("OTEL_", "TRACELOOP_", "OPENINFERENCE_", "OPENLIT_", "HAYSTACK_")
OPT_IN = {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


@dataclass(frozen=True, slots=True)
class Venv:
    """An instrumentation venv: its folder under the repo, its requirements and its make target
    (which stamps it ``.installed`` once its requirements are in)."""

    folder: str
    requirements: str  # under tests/instrumentations
    target: str

    @property
    def python(self) -> Path:
        """Its interpreter."""
        return REPO_ROOT / self.folder / "bin" / "python"

    def current(self) -> bool:
        """Built, and stamped since its requirements last changed."""
        stamp = REPO_ROOT / self.folder / ".installed"
        requirements = REPO_ROOT / "tests" / "instrumentations" / self.requirements
        return (self.python.exists() and stamp.exists()
                and stamp.stat().st_mtime >= requirements.stat().st_mtime)


FIRST = Venv(".venv-instrumentations", "requirements.txt", "instrumentation-venv")
# OpenLIT needs openai<3, the first venv has 3.57.0 (requirements-2.txt).
SECOND = Venv(".venv-instrumentations-2", "requirements-2.txt", "instrumentation-venv-2")
VENVS = (FIRST, SECOND)


@dataclass(frozen=True, slots=True)
class Setup:
    """One way a team instruments its RAG program: which program, with what."""

    name: str
    module: str  # under tests.instrumentations.apps
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    venv: Venv = FIRST

    @property
    def service(self) -> str:
        """Its resource's ``service.name``."""
        return f"rag-{self.name}"


OPENAI_V2 = ("--instrumentation", "openai-v2")
OPENLLMETRY = ("--instrumentation", "openllmetry")
OPENINFERENCE = ("--instrumentation", "openinference")
SETUPS = (
    # The OpenTelemetry project's own instrumentation in its three capture modes.
    Setup("openai-v2-true", "openai_sdk", OPENAI_V2, {CAPTURE: "true"}),
    Setup("openai-v2-event-only", "openai_sdk", OPENAI_V2, {CAPTURE: "event_only", **OPT_IN}),
    Setup("openai-v2-span-only", "openai_sdk", OPENAI_V2, {CAPTURE: "span_only", **OPT_IN}),
    # OpenLLMetry: the OpenAI SDK, and a LangChain chain with a retriever, the documents in
    # the prompt or (the last) only on the retriever's span.
    Setup("openllmetry-openai", "openai_sdk", OPENLLMETRY),
    Setup("openllmetry-langchain", "langchain_rag", (*OPENLLMETRY, "--docs-in-prompt")),
    Setup("openllmetry-langchain-retriever", "langchain_rag", OPENLLMETRY),
    # OpenInference: the OpenAI SDK, the same LangChain chain (documents in the prompt), and a
    # Haystack pipeline (BM25 retriever, chat generator).
    Setup("openinference-openai", "openai_sdk", OPENINFERENCE),
    Setup("openinference-langchain", "langchain_rag", (*OPENINFERENCE, "--docs-in-prompt")),
    Setup("openinference-haystack", "haystack_rag"),
    # Pydantic AI's own instrumentation (the documents in the instructions, or returned by a
    # tool the model calls), and OpenLIT on the OpenAI SDK (the second venv).
    Setup("pydantic-ai", "pydantic_ai_agent"),
    Setup("pydantic-ai-tool", "pydantic_ai_agent", ("--retrieve-tool",)),
    Setup("openlit-openai", "openlit_openai", venv=SECOND),
)


def venv_unavailable_reason(venvs: tuple[Venv, ...] = VENVS) -> str | None:
    """Build the venvs that are missing or older than their requirements (their make targets,
    at once); why one can be neither found current nor built, else None."""
    stale = [venv for venv in venvs if not venv.current()]
    if not stale:
        return None
    targets = " ".join(venv.target for venv in stale)
    if shutil.which("make") is None:
        return f"{', '.join(venv.folder for venv in stale)}: missing or stale, and no make"
    try:
        built = subprocess.run(
            ["make", "--no-print-directory", f"-j{len(stale)}", "--output-sync=target",
             *(venv.target for venv in stale)],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
            check=False)
    except subprocess.TimeoutExpired:
        return f"make {targets} took over {BUILD_TIMEOUT_S:.0f}s"
    if built.returncode != 0 or not all(venv.current() for venv in stale):
        tail = "\n".join((built.stdout + built.stderr).strip().splitlines()[-15:])
        return f"make {targets} failed (exit {built.returncode}):\n{tail}"
    return None


@dataclass(frozen=True, slots=True)
class Asked:
    """One question as the program reported it: its trace, and the answer it got."""

    case: Case
    trace_id: str  # 32 hex
    answer: str


async def run(setup: Setup, model_url: str, otlp_endpoint: str) -> list[Asked]:
    """Run the setup's program to its end (it flushes its telemetry before it exits); what it
    asked. Fails with the program's stderr when it fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_THEIRS)}
    process = await asyncio.create_subprocess_exec(
        str(setup.venv.python), "-m", f"tests.instrumentations.apps.{setup.module}", *setup.args,
        "--model-url", model_url, "--otlp-endpoint", otlp_endpoint, "--service", setup.service,
        cwd=REPO_ROOT, env=env | setup.env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), RUN_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"{setup.name} ran over {RUN_TIMEOUT_S:.0f}s") from None
    assert process.returncode == 0, f"{setup.name} failed:\n{stderr.decode(errors='replace')}"
    asked = []
    for line in stdout.decode().splitlines():
        reported = json.loads(line)
        case = next(c for c in BY_QUESTION.values() if c.case_id == reported["case"])
        asked.append(Asked(case, reported["trace_id"], reported["answer"]))
    return asked


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A ``chat.completion`` body whose one choice calls the tool ``name``."""
    body = completion(None, MODEL, prompt_tokens=40, completion_tokens=12)
    [choice] = body["choices"]
    choice["finish_reason"] = "tool_calls"
    choice["message"]["tool_calls"] = [{
        "id": f"call_{body['id'][-12:]}", "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }]
    return body


class StandInModel:
    """A setup's model: a chat-completions server on loopback answering each question with its
    case's reply tagged with the setup's name (so that every trace's answer is its own across
    setups), keeping every request (to see what a program put in its prompt). Offered tools, it
    first calls the first of them with the question (``{"query": ...}``), as a model asked to
    retrieve does, and answers once the request carries a tool's result."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.requests: list[dict[str, Any]] = []
        self.server = JudgeServer(self._respond, models=(MODEL,))

    def reply(self, case: Case) -> str:
        """What it answers ``case.question``."""
        return f"{case.answer} ({self.tag})"

    def _respond(self, request: dict[str, Any]) -> Reply:
        self.requests.append(request)
        users = [m for m in request.get("messages", []) if m.get("role") == "user"]
        question = users[-1].get("content", "") if users else ""
        if isinstance(question, list):  # content parts
            question = " ".join(str(part.get("text", "")) for part in question)
        case = BY_QUESTION.get(str(question).strip())
        tools = request.get("tools") or []
        if case is not None and tools and not any(
                m.get("role") == "tool" for m in request.get("messages", [])):
            return Reply(body=tool_call(tools[0]["function"]["name"], {"query": case.question}))
        text = self.reply(case) if case is not None else "I do not know."
        return Reply(body=completion(text, MODEL, prompt_tokens=60, completion_tokens=9))

    def prompts_for(self, question: str) -> list[str]:
        """Every message text of the requests that asked ``question``."""
        return [str(m.get("content")) for request in self.requests
                for m in request.get("messages", [])
                if any(u.get("content") == question for u in request.get("messages", []))]

    def __enter__(self) -> StandInModel:
        self.server.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.stop()
