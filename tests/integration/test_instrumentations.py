"""Real instrumentation output, through the real collector's traces AND logs pipelines, into Kafka,
judged by the real worker.

Twelve setups a team runs (``tests.support.instrumentations.SETUPS``: the ten of issue #27, the
OpenLLMetry LangChain chain and the Pydantic AI agent twice), each a small RAG program in an
instrumentation venv (``tests/instrumentations``, versions pinned in its requirements.txt, and
requirements-2.txt for OpenLIT, whose pins conflict with the first's) asking five questions
with three documents each of the stand-in model on loopback: the OpenTelemetry project's
``opentelemetry-instrumentation-openai-v2`` in its three content-capture modes; OpenLLMetry
(traceloop) on the OpenAI SDK and on a LangChain chain with a retriever (the documents in the
prompt, or only on the retriever's span); OpenInference (Arize) on the OpenAI SDK, on the same
LangChain chain and on a Haystack pipeline (BM25 retriever); Pydantic AI's own instrumentation
(the documents in the agent's instructions, or returned by a tool the model calls); and OpenLIT
on the OpenAI SDK. They run at once, against one collector (OTLP/HTTP,
``partition_traces_by_id`` and ``partition_logs_by_trace_id`` into two topics of the same
partition count).

Where each setup puts the content, as read back from the topics (``WHERE``: the extractor of
each setup, asserted for every trace below). Answer / input / documents:

- openai-v2, ``CAPTURE_MESSAGE_CONTENT=true`` (no opt-in): log records only. Answer: log
  ``gen_ai.choice``, body ``message.content``; input: log ``gen_ai.user.message``, body
  ``content``; documents: in the prompt, log ``gen_ai.system.message``, body ``content``.
- openai-v2, ``event_only`` (``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``): one
  log record ``gen_ai.client.inference.operation.details``, empty body, attributes
  ``gen_ai.output.messages`` (answer) and ``gen_ai.input.messages`` (user: input; system: the
  documents in the prompt), each an OTLP array of kvlists (``role``, ``parts[].content``), not
  a JSON string as on spans.
- openai-v2, ``span_only`` (opt-in): the ``chat gpt-4o-mini`` span, ``gen_ai.output.messages`` /
  ``gen_ai.input.messages`` (JSON strings; system message: the documents in the prompt).
- OpenLLMetry, OpenAI SDK: the ``openai.chat`` span, the same two attributes (JSON strings).
- OpenLLMetry, LangChain: the ``ChatOpenAI.chat`` span, ``gen_ai.output.messages`` /
  ``gen_ai.input.messages`` (user only: the system prompt is ``gen_ai.system_instructions``);
  the ``RunnableSequence.workflow`` span (``gen_ai.operation.name`` ``invoke_agent``) also has
  the answer in ``traceloop.entity.output`` (JSON ``outputs``); documents: the retriever span
  ``vector_db_retrieve ToyRetriever`` (``gen_ai.operation.name`` ``vector_db_retrieve``,
  ``traceloop.span.kind`` ``task``), ``traceloop.entity.output`` = ``gen_ai.task.output``, JSON
  ``{"documents": [{"page_content", "metadata"}], "count"}``; and in ``gen_ai.system_instructions``
  where the chain pastes them into the prompt. (A ``RunnableParallel`` task span's
  ``traceloop.entity.output`` holds them too, as LangChain-serialized ``Document`` objects.)
- The same chain with the documents not in the prompt: only the retriever span has them.
- OpenInference, OpenAI SDK: the ``ChatCompletion`` span (``openinference.span.kind`` ``LLM``),
  flattened ``llm.output_messages.0.message.content`` (answer) and ``llm.input_messages.N.
  message.role`` / ``.content`` (user: input; system: the documents in the prompt); also
  ``input.value`` / ``output.value``, the raw request and response as JSON.
- OpenInference, LangChain (documents in the prompt): the ``ChatOpenAI`` LLM span, the same
  ``llm.*_messages``; the outermost ``RunnableSequence`` CHAIN span has the question and the
  answer as plain ``input.value`` / ``output.value``; documents: the ``ToyRetriever`` RETRIEVER
  span, ``retrieval.documents.N.document.content`` (and ``.metadata``, JSON).
- OpenInference, Haystack: the ``OpenAIChatGenerator.run`` LLM span, the same
  ``llm.*_messages``; documents: the ``InMemoryBM25Retriever.run`` RETRIEVER span,
  ``retrieval.documents.N.document.content`` (``.id``, ``.score``, ``.metadata``), best first
  (not the case's order), the same order in the prompt; the outermost ``Pipeline.run`` CHAIN
  span's ``input.value`` / ``output.value`` are the pipeline's data and result as JSON, its
  messages Python reprs (no answer text there).
- Pydantic AI: the ``chat gpt-4o-mini`` span (``gen_ai.operation.name`` ``chat``),
  ``gen_ai.output.messages`` / ``gen_ai.input.messages`` (user only), the documents in
  ``gen_ai.system_instructions`` (the agent's instructions: JSON ``[{"type", "content"}]``);
  the ``invoke_agent answering`` span has the answer in ``final_result``, the same instructions
  and the conversation in ``pydantic_ai.all_messages``.
- Pydantic AI, the documents from a ``retrieve`` tool: two ``chat gpt-4o-mini`` spans, the
  first's output a ``tool_call`` part; the ``execute_tool retrieve`` span
  (``gen_ai.operation.name`` ``execute_tool``) has ``gen_ai.tool.call.arguments`` (the question)
  and ``gen_ai.tool.call.result`` (JSON: the three texts); the second chat span's
  ``gen_ai.input.messages`` carry them again as a ``user`` message's ``tool_call_response`` part
  (``result``), its ``gen_ai.output.messages`` the answer; the instructions
  (``gen_ai.system_instructions``) name the tool and hold no document.
- OpenLIT, OpenAI SDK: the ``chat gpt-4o-mini`` span, ``gen_ai.output.messages`` /
  ``gen_ai.input.messages`` (system and user) and the system message again as
  ``gen_ai.system_instructions``; and one ``gen_ai.client.inference.operation.details`` log
  record on that span with the same two messages attributes (OTLP arrays), body ``""``.

In the two openai-v2 log modes the chat span carries no content at all. Each log record (those
and OpenLIT's) carries its chat span's trace and span ids, and no ``time_unix_nano`` (only
``observed_time_unix_nano``).
The worker (``OTLP_LOGS_TOPIC``) judges each trace once with the program's answer, and the
retriever setups with the retriever's documents (``context_source: retrieval``), the tool
setup with the tool's documents (the answering call's input, ``context_source: llm_input``),
each context text once: one worker that was up while the programs ran, as in production, and
one started after them (a restart, or a worker catching up: both topics' records are there at
once).
Skipped only where the collector can be neither built nor found cached, or an instrumentation
venv can be neither found nor built.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from aiokafka import ConsumerRecord
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogsData

from consumer.inputs.otlp.decode import decode_otlp
from consumer.judge.prompt import read_data
from consumer.localjudge.server import JudgeServer
from consumer.telemetry.spans import Span
from tests.instrumentations.cases import CASES, SYSTEM_PROMPT, TOOL_PROMPT, context
from tests.support import collector, genai_collector, instrumentations
from tests.support.fake_judge import PROBE, Call, ScriptedJudge
from tests.support.instrumentations import SETUPS, Asked, Setup, StandInModel
from tests.support.streams import Topics, read_all, verdicts_by_trace
from tests.support.workers import Worker, WorkerPool, tracebacks, worker_env

# One xdist process for the module (``make test`` runs --dist loadgroup): the programs, the
# collector and the live worker run once, for all of its tests.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("instrumentations")]

PARTITIONS = 3
TRACES = len(SETUPS) * len(CASES)
# The programs flush their spans, then their log records, at exit: the last questions' log
# records reach Kafka after their trace's root span (by up to 0.2 s, seen on a loaded machine),
# and a trace closes once its root is in and it was quiet this long. With 0.5 s the live worker
# once published fewer verdicts than traces on a loaded machine (a trace closed before its log
# records, it seems). The worker's default is 10 s.
QUIET_S = "2"
# The setups whose retriever span holds the documents: the judge's context is theirs.
RETRIEVER_SETUPS = {"openllmetry-langchain", "openllmetry-langchain-retriever",
                    "openinference-langchain", "openinference-haystack"}
RANKED = {"openinference-haystack"}  # BM25's order, best first: the case's three, reordered
# The documents returned by a tool the model called (the prompt names the tool).
TOOL_SETUPS = {"pydantic-ai-tool"}
NOT_IN_PROMPT = {"openllmetry-langchain-retriever"}  # the model never saw the documents
# The content in log records alone (the chat span has none), and every setup's log records per
# question (OpenLIT writes its one record besides the same content on the chat span).
LOG_ONLY = {"openai-v2-true", "openai-v2-event-only"}
LOGS_PER_QUESTION = {"openai-v2-true": 3, "openai-v2-event-only": 1, "openlit-openai": 1}
EXPECTED_VERDICT = {"everest": "fail"}  # [[score=1]]; every other reply passes
# The span the answer is read from (the verdict's span_id), where the worker's precedence
# names one span: the chat span, or the outermost GenAI span's ``output.value`` text.
ANSWER_SPAN = {"openai-v2-true": "chat gpt-4o-mini", "openai-v2-event-only": "chat gpt-4o-mini",
               "openai-v2-span-only": "chat gpt-4o-mini", "openllmetry-openai": "openai.chat",
               "openinference-openai": "ChatCompletion",
               "openinference-langchain": "RunnableSequence",
               "openinference-haystack": "OpenAIChatGenerator.run",
               "pydantic-ai": "chat gpt-4o-mini", "openlit-openai": "chat gpt-4o-mini"}
CHAT_SPAN = {name: ANSWER_SPAN[name] for name in LOGS_PER_QUESTION}  # their records' span


# ---------------------------------------------------------------------------- what arrived


@dataclass(frozen=True, slots=True)
class Log:
    """A log record as read back from the logs topic, ids in hex, values as Python's."""

    event_name: str
    trace_id: str
    span_id: str
    body: Any
    attributes: dict[str, Any]
    scope: str
    time_unix_nano: int
    observed_time_unix_nano: int


@dataclass
class Arrived:
    """One trace as the topics hold it: its GenAI spans (as the worker decodes them), its log
    records, and the partitions and keys of the records that carried them."""

    spans: list[Span] = field(default_factory=list)
    logs: list[Log] = field(default_factory=list)
    span_partitions: set[int] = field(default_factory=set)
    log_partitions: set[int] = field(default_factory=set)
    keys: set[bytes] = field(default_factory=set)

    def span(self, name: str) -> Span:
        """The one span of that name."""
        [found] = self.named(name)
        return found

    def named(self, name: str) -> list[Span]:
        """The spans of that name, in start order."""
        return sorted((span for span in self.spans if span.name == name),
                      key=lambda span: span.start_unix_nano)

    def log(self, event_name: str) -> Log:
        """The one log record of that event name."""
        [found] = [log for log in self.logs if log.event_name == event_name]
        return found


@dataclass(frozen=True)
class Delivered:
    """Every setup's run and what reached the two topics."""

    topics: Topics
    logs_topic: str
    asked: dict[str, list[Asked]]  # setup name -> its five questions
    traces: dict[str, Arrived]  # trace id -> what arrived of it
    models: dict[str, StandInModel]  # setup name -> its model
    send_s: float  # from the collector's start to the last program's exit
    live: Worker  # the worker that was reading while the programs ran


def value(any_value: AnyValue) -> Any:
    """An OTLP ``AnyValue`` as a Python value (kvlist -> dict, array -> list)."""
    kind = any_value.WhichOneof("value")
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in any_value.kvlist_value.values}
    if kind == "array_value":
        return [value(item) for item in any_value.array_value.values]
    return None if kind is None else getattr(any_value, kind)


def _arrived(span_records: list[Any], log_records: list[Any]) -> dict[str, Arrived]:
    traces: dict[str, Arrived] = defaultdict(Arrived)
    for record in span_records:
        for span in decode_otlp(record.value, "otlp_proto").kept:
            traces[span.trace_id].spans.append(span)
            traces[span.trace_id].span_partitions.add(record.partition)
    for record in log_records:
        for resource_logs in LogsData.FromString(record.value).resource_logs:
            for scope_logs in resource_logs.scope_logs:
                for log in scope_logs.log_records:
                    trace_id = log.trace_id.hex()
                    traces[trace_id].logs.append(Log(
                        log.event_name, trace_id, log.span_id.hex(), value(log.body),
                        {kv.key: value(kv.value) for kv in log.attributes},
                        scope_logs.scope.name, log.time_unix_nano, log.observed_time_unix_nano))
                    traces[trace_id].log_partitions.add(record.partition)
                    traces[trace_id].keys.add(record.key or b"")
    return dict(traces)


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def tools() -> None:
    """The collector binary and the instrumentation venvs, built once or found (minutes cold)."""
    collector.available()
    reason = instrumentations.venv_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def models() -> Iterator[dict[str, StandInModel]]:
    """Each setup's model on loopback."""
    with ExitStack() as stack:
        yield {setup.name: stack.enter_context(StandInModel(setup.name)) for setup in SETUPS}


@pytest.fixture(scope="module")
def judge() -> Iterator[tuple[ScriptedJudge, JudgeServer]]:
    """The fake judge of both workers, for the module."""
    scripted = ScriptedJudge()
    with JudgeServer(scripted, models=("scripted-judge",)) as server:
        yield scripted, server


@pytest.fixture(scope="module")
async def delivered(kafka: str, tools: None, models: dict[str, StandInModel],
                    judge: tuple[ScriptedJudge, JudgeServer],
                    tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Delivered]:
    """Every setup's program run at once against one collector, with a worker already reading
    both topics (as in production: it stays up for the module's tests); both topics read back.
    """
    topics = Topics.fresh("instrumentations")
    logs_topic = topics.traces.replace("traces-", "logs-", 1)
    both = genai_collector.GenAITopics(topics.traces, logs_topic)
    await genai_collector.create_topics(kafka, both, PARTITIONS)
    await genai_collector.create_topics(
        kafka, genai_collector.GenAITopics(topics.verdicts, topics.dlq), 1)
    async with WorkerPool(tmp_path_factory.mktemp("live-worker")) as pool:
        live = await pool.start(_worker_env(kafka, topics, logs_topic, judge[1].url), "live")
        await _owns_partitions(live)  # so what is sent from now on is read live
        started = time.monotonic()
        with genai_collector.running(kafka, both, tmp_path_factory.mktemp("otelcol")) as running:
            runs = await asyncio.gather(*(
                instrumentations.run(setup, models[setup.name].server.url, running.endpoint)
                for setup in SETUPS))
            send_s = time.monotonic() - started
            asked = {setup.name: found for setup, found in zip(SETUPS, runs, strict=True)}
            # Each trace is one record at least: enough once a record per trace is there.
            span_records = await genai_collector.read_records(
                kafka, topics.traces, enough=TRACES)
            log_records = await genai_collector.read_records(
                kafka, logs_topic, enough=len(LOGS_PER_QUESTION) * len(CASES), settle_s=0.5)
        yield Delivered(topics, logs_topic, asked, _arrived(span_records, log_records), models,
                        send_s, live)
        assert await live.terminate() == 0


def _worker_env(kafka: str, topics: Topics, logs_topic: str, judge_url: str) -> dict[str, str]:
    return worker_env(topics.env(kafka), judge_url, TRACES_FORMAT="otlp_proto",
                      OTLP_LOGS_TOPIC=logs_topic, TRACE_QUIET_SECONDS=QUIET_S,
                      TRACE_MAX_WAIT_SECONDS="30", LOG_LEVEL="info",
                      # The venv's entry point imports the checkout it was installed from.
                      PYTHONPATH=str(instrumentations.REPO_ROOT))


async def _owns_partitions(worker: Worker, timeout_s: float = 30.0) -> None:
    """Wait until the worker was assigned its partitions (a non-empty assignment)."""
    deadline = time.monotonic() + timeout_s
    while not any(event.get("event") == "partitions_assigned" and event.get("partitions")
                  for event in worker.events()):
        assert worker.running, worker.log()
        assert time.monotonic() < deadline, f"no partitions after {timeout_s}s:\n{worker.log()}"
        await asyncio.sleep(0.1)


# ---------------------------------------------------------------------------- where it is


@dataclass(frozen=True, slots=True)
class Found:
    """A trace's content, read from where its setup puts it."""

    answer: str
    question: str
    documents: tuple[str, ...]  # the retriever's texts; () where there is no retriever
    prompt: str  # the system prompt the model got


def _texts(messages: list[dict[str, Any]], role: str) -> list[str]:
    return [str(part["content"]) for message in messages if message["role"] == role
            for part in message["parts"] if part.get("type", "text") == "text"]


def _from_messages(inputs: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> Found:
    [answer], [question] = _texts(outputs, "assistant"), _texts(inputs, "user")
    return Found(answer, question, (), "\n".join(_texts(inputs, "system")))


def _openai_v2_true(trace: Arrived) -> Found:
    choice = trace.log("gen_ai.choice").body
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] == "stop"
    return Found(choice["message"]["content"], trace.log("gen_ai.user.message").body["content"],
                 (), trace.log("gen_ai.system.message").body["content"])


def _openai_v2_event_only(trace: Arrived) -> Found:
    details = trace.log("gen_ai.client.inference.operation.details")
    assert details.body is None  # everything is in its attributes, structured
    return _from_messages(details.attributes["gen_ai.input.messages"],
                          details.attributes["gen_ai.output.messages"])


def _chat_messages(attributes: Mapping[str, Any]) -> Found:
    """A chat span's ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (JSON strings)."""
    return _from_messages(json.loads(str(attributes["gen_ai.input.messages"])),
                          json.loads(str(attributes["gen_ai.output.messages"])))


def _instructions(attributes: Mapping[str, Any]) -> str:
    """The one text of a span's ``gen_ai.system_instructions``."""
    [instructions] = json.loads(str(attributes["gen_ai.system_instructions"]))
    return str(instructions["content"])


def _span_messages(span_name: str) -> Callable[[Arrived], Found]:
    def read(trace: Arrived) -> Found:
        return _chat_messages(trace.span(span_name).attributes)
    return read


def _langchain(trace: Arrived) -> Found:
    chat = trace.span("ChatOpenAI.chat").attributes
    found = _chat_messages(chat)
    assert found.prompt == "", "the system prompt is not among the input messages"
    retriever = trace.span("vector_db_retrieve ToyRetriever").attributes
    assert retriever["gen_ai.operation.name"] == "vector_db_retrieve"
    assert retriever["traceloop.span.kind"] == "task"
    assert retriever["traceloop.entity.output"] == retriever["gen_ai.task.output"]
    output = json.loads(str(retriever["traceloop.entity.output"]))
    assert output["count"] == len(output["documents"])
    assert json.loads(str(retriever["traceloop.entity.input"]))["query"] == found.question
    workflow = trace.span("RunnableSequence.workflow").attributes
    assert json.loads(str(workflow["traceloop.entity.output"]))["outputs"] == found.answer
    return Found(found.answer, found.question,
                 tuple(doc["page_content"] for doc in output["documents"]), _instructions(chat))


def _flattened(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """OpenInference's flattened lists (``llm.input_messages.0.message.role``, ...) as one dict
    per index, its keys what follows the index (``message.role``)."""
    items: dict[int, dict[str, Any]] = defaultdict(dict)
    for key, found in attributes.items():
        if key.startswith(prefix + "."):
            index, rest = key[len(prefix) + 1:].split(".", 1)
            items[int(index)][rest] = found
    return [items[index] for index in sorted(items)]


def _openinference_messages(attributes: Mapping[str, Any], key: str,
                            role: str) -> list[str]:
    return [str(m["message.content"]) for m in _flattened(attributes, key)
            if m["message.role"] == role]


def _openinference_llm(span: Span) -> Found:
    """An OpenInference LLM span: ``llm.input_messages`` / ``llm.output_messages``."""
    attributes = span.attributes
    assert attributes["openinference.span.kind"] == "LLM"
    [answer] = _openinference_messages(attributes, "llm.output_messages", "assistant")
    [question] = _openinference_messages(attributes, "llm.input_messages", "user")
    [prompt] = _openinference_messages(attributes, "llm.input_messages", "system")
    return Found(answer, question, (), prompt)


def _openinference_retriever(span: Span) -> tuple[str, ...]:
    """An OpenInference RETRIEVER span's ``retrieval.documents.N.document.content``."""
    assert span.attributes["openinference.span.kind"] == "RETRIEVER"
    return tuple(str(doc["document.content"])
                 for doc in _flattened(span.attributes, "retrieval.documents"))


def _openinference_openai(trace: Arrived) -> Found:
    chat = trace.span("ChatCompletion")
    found = _openinference_llm(chat)
    # The raw request and response too, as JSON: no answer key in the response.
    assert json.loads(str(chat.attributes["input.value"]))["messages"][1] == {
        "role": "user", "content": found.question}
    response = json.loads(str(chat.attributes["output.value"]))
    assert response["choices"][0]["message"]["content"] == found.answer
    return found


def _openinference_langchain(trace: Arrived) -> Found:
    found = _openinference_llm(trace.span("ChatOpenAI"))
    chain = trace.span("RunnableSequence").attributes  # the outermost: plain text both ways
    assert (chain["input.value"], chain["output.value"]) == (found.question, found.answer)
    assert chain["openinference.span.kind"] == "CHAIN"
    retriever = trace.span("ToyRetriever")
    assert retriever.attributes["input.value"] == found.question
    return replace(found, documents=_openinference_retriever(retriever))


def _openinference_haystack(trace: Arrived) -> Found:
    found = _openinference_llm(trace.span("OpenAIChatGenerator.run"))
    retriever = trace.span("InMemoryBM25Retriever.run")
    assert json.loads(str(retriever.attributes["input.value"]))["query"] == found.question
    # The outermost span's output: the pipeline's result, its messages as Python reprs.
    pipeline = json.loads(str(trace.span("Pipeline.run").attributes["output.value"]))
    [reply] = pipeline["llm"]["replies"]
    assert reply.startswith("ChatMessage(_role=<ChatRole.ASSISTANT")
    return replace(found, documents=_openinference_retriever(retriever))


def _pydantic_ai(trace: Arrived) -> Found:
    chat = trace.span("chat gpt-4o-mini").attributes
    found = _chat_messages(chat)
    assert found.prompt == "", "the instructions are not among the input messages"
    agent = trace.span("invoke_agent answering").attributes
    assert agent["gen_ai.operation.name"] == "invoke_agent"
    assert agent["final_result"] == found.answer
    assert agent["gen_ai.system_instructions"] == chat["gen_ai.system_instructions"]
    return replace(found, prompt=_instructions(chat))


def _pydantic_ai_tool(trace: Arrived) -> Found:
    """Two chat spans: the model asks for the tool, then answers from what it returned."""
    asking, answering = trace.named("chat gpt-4o-mini")
    [call] = [part for message in json.loads(str(asking.attributes["gen_ai.output.messages"]))
              for part in message["parts"]]
    assert (call["type"], call["name"]) == ("tool_call", "retrieve")
    tool = trace.span("execute_tool retrieve").attributes
    assert (tool["gen_ai.operation.name"], tool["gen_ai.tool.call.id"]) == (
        "execute_tool", call["id"])
    documents = tuple(json.loads(str(tool["gen_ai.tool.call.result"])))
    inputs = json.loads(str(answering.attributes["gen_ai.input.messages"]))
    found = _chat_messages(answering.attributes)
    assert json.loads(str(tool["gen_ai.tool.call.arguments"])) == {"query": found.question}
    # The tool's result goes back to the model in a user message (format version 5's role).
    [response] = [part for message in inputs for part in message["parts"]
                  if part["type"] == "tool_call_response"]
    assert (response["id"], tuple(response["result"])) == (call["id"], documents)
    agent = trace.span("invoke_agent answering").attributes
    assert agent["final_result"] == found.answer
    return replace(found, documents=documents, prompt=_instructions(answering.attributes))


def _openlit(trace: Arrived) -> Found:
    chat = trace.span("chat gpt-4o-mini")
    found = _chat_messages(chat.attributes)
    assert _instructions(chat.attributes) == found.prompt, "the system message, a second time"
    # And the same messages once more in a log record on the chat span, structured.
    details = trace.log("gen_ai.client.inference.operation.details")
    assert details.body == ""
    assert (details.trace_id, details.span_id) == (chat.trace_id, chat.span_id)
    assert _from_messages(details.attributes["gen_ai.input.messages"],
                          details.attributes["gen_ai.output.messages"]) == found
    return found


WHERE: Mapping[str, Callable[[Arrived], Found]] = {
    "openai-v2-true": _openai_v2_true,
    "openai-v2-event-only": _openai_v2_event_only,
    "openai-v2-span-only": _span_messages(ANSWER_SPAN["openai-v2-span-only"]),
    "openllmetry-openai": _span_messages(ANSWER_SPAN["openllmetry-openai"]),
    "openllmetry-langchain": _langchain,
    "openllmetry-langchain-retriever": _langchain,
    "openinference-openai": _openinference_openai,
    "openinference-langchain": _openinference_langchain,
    "openinference-haystack": _openinference_haystack,
    "pydantic-ai": _pydantic_ai,
    "pydantic-ai-tool": _pydantic_ai_tool,
    "openlit-openai": _openlit,
}
CONTENT_KEYS = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
                "gen_ai.prompt", "gen_ai.completion")


@pytest.mark.parametrize("setup", SETUPS, ids=[setup.name for setup in SETUPS])
def test_each_setup_puts_the_content_where_the_table_says(
    delivered: Delivered, setup: Setup,
) -> None:
    asked = delivered.asked[setup.name]
    assert [a.case for a in asked] == list(CASES)
    for a in asked:
        assert a.answer == delivered.models[setup.name].reply(a.case), "the model's reply"
        trace = delivered.traces[a.trace_id]
        assert {span.resource.get("service.name") for span in trace.spans} == {setup.service}
        found = WHERE[setup.name](trace)
        assert found.answer == a.answer
        assert found.question == a.case.question
        if setup.name in RANKED:  # the case's three, best first
            assert sorted(found.documents) == sorted(a.case.documents)
        elif setup.name in RETRIEVER_SETUPS | TOOL_SETUPS:
            assert found.documents == a.case.documents
        else:
            assert found.documents == ()
        if setup.name in NOT_IN_PROMPT:
            prompts = delivered.models[setup.name].prompts_for(a.case.question)
            assert prompts, "the model was asked"
            assert not any(doc in prompt for doc in a.case.documents for prompt in prompts), \
                "the documents reach the judge only if they come from the retriever span"
        elif setup.name in RANKED:  # pasted into the prompt, in the retriever's order
            assert found.prompt == _pasted(found.documents)
        elif setup.name in TOOL_SETUPS:  # the model got them as the tool's result
            assert found.prompt == TOOL_PROMPT
        else:  # pasted into the prompt
            assert found.prompt == context(a.case)
        if setup.name in LOG_ONLY:
            # The content is in the log records alone, each on its chat span.
            chat = trace.span(CHAT_SPAN[setup.name])
            assert not set(CONTENT_KEYS) & set(chat.attributes)
            assert {(log.trace_id, log.span_id) for log in trace.logs} == {
                (a.trace_id, chat.span_id)}
            assert {log.scope for log in trace.logs} <= {
                "opentelemetry.instrumentation.openai_v2", "opentelemetry.util.genai.handler"}
        elif setup.name in LOGS_PER_QUESTION:  # OpenLIT: on the chat span, and logged too
            assert {log.scope for log in trace.logs} == {"openlit.instrumentation.openai"}
        else:
            assert trace.logs == [], "no log records where the content is on spans"
        # Stamped only when observed: a record's time is its observed time.
        assert all(log.time_unix_nano == 0 < log.observed_time_unix_nano for log in trace.logs)


def _pasted(documents: Sequence[str]) -> str:
    """The system prompt with the documents pasted in, as ``cases.context`` writes it."""
    return SYSTEM_PROMPT + "\n\n" + "\n".join(f"- {text}" for text in documents)


def test_log_records_are_keyed_and_partitioned_with_their_spans(delivered: Delivered) -> None:
    log_traces = [a.trace_id for name in LOGS_PER_QUESTION for a in delivered.asked[name]]
    assert len(log_traces) == len(LOGS_PER_QUESTION) * len(CASES)
    for trace_id in log_traces:
        trace = delivered.traces[trace_id]
        assert trace.keys == {trace_id.encode()}
        assert len(trace.span_partitions) == 1
        assert trace.log_partitions == trace.span_partitions, trace_id
    # Three per-message records per question in `true` mode, one in `event_only`, one from
    # OpenLIT; none from any other setup.
    counts = {name: sum(len(delivered.traces[a.trace_id].logs) for a in asked)
              for name, asked in delivered.asked.items()}
    assert counts == {setup.name: LOGS_PER_QUESTION.get(setup.name, 0) * len(CASES)
                      for setup in SETUPS}


# ---------------------------------------------------------------------------- judged


async def test_the_live_worker_judged_every_trace_once_from_spans_and_logs(
    kafka: str, delivered: Delivered, judge: tuple[ScriptedJudge, JudgeServer],
) -> None:
    topics, worker = delivered.topics, delivered.live
    records = await read_all(kafka, topics.verdicts, at_least=TRACES, timeout_s=60, settle_s=1.0)
    _assert_judged(delivered, records, judge[0].calls, worker)
    assert await read_all(kafka, topics.dlq, timeout_s=1) == []




async def test_the_judge_gets_each_context_text_once(
    kafka: str, delivered: Delivered, judge: tuple[ScriptedJudge, JudgeServer],
) -> None:
    """OpenLIT records its system prompt twice (``gen_ai.system_instructions`` and the first
    input message): the judge gets it once, as from every other setup."""
    records = await read_all(kafka, delivered.topics.verdicts, at_least=TRACES, timeout_s=60,
                             settle_s=0.5)
    verdicts = verdicts_by_trace(records)
    judged_data = {data["answer"]: data for data in (
        read_data(call.request["messages"]) for call in judge[0].calls if call.answer != PROBE)}
    twice = set()
    for name, asked in delivered.asked.items():
        for a in asked:
            [verdict] = verdicts[a.trace_id]
            contents = [doc["content"] for doc in judged_data[a.answer]["documents"]]
            assert verdict["truncation"]["documents_received"] == len(contents), name
            if len(set(contents)) < len(contents):
                twice.add(name)
    assert twice == set()


async def test_a_worker_started_after_them_judges_every_trace_once_from_spans_and_logs(
    kafka: str, delivered: Delivered, judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
) -> None:
    """A restart, or a worker catching up: both topics' records are all there at once."""
    later = replace(Topics.fresh("instrumentations-later"), traces=delivered.topics.traces)
    await genai_collector.create_topics(
        kafka, genai_collector.GenAITopics(later.verdicts, later.dlq), 1)
    first_call = len(judge[0].calls)
    async with WorkerPool(tmp_path) as pool:
        worker = await pool.start(_worker_env(kafka, later, delivered.logs_topic, judge[1].url))
        records = await read_all(kafka, later.verdicts, at_least=TRACES, timeout_s=60,
                                 settle_s=1.0)
        assert await worker.terminate() == 0
    _assert_judged(delivered, records, judge[0].calls[first_call:], worker)
    assert await read_all(kafka, later.dlq, timeout_s=1) == []




def _assert_judged(delivered: Delivered, records: list[ConsumerRecord[bytes, bytes]],
                   calls: Sequence[Call], worker: Worker) -> None:
    """Every trace judged once, from its setup's content, on the right context."""
    expected = {a.trace_id: (name, a) for name, asked in delivered.asked.items() for a in asked}
    verdicts = verdicts_by_trace(records)
    # Per setup: how many of its traces were judged, and from what context; all at once, so
    # that a failure shows every setup's figures.
    of_setup = {name: [v for a in asked for v in verdicts.get(a.trace_id, [])]
                for name, asked in delivered.asked.items()}
    judged = {name: (len(found), sorted({v["context_source"] for v in found}))
              for name, found in of_setup.items()}
    assert judged == {setup.name: (len(CASES), [
        "retrieval" if setup.name in RETRIEVER_SETUPS else "llm_input"]) for setup in SETUPS
    }, worker.log()[-3000:]
    assert set(verdicts) == set(expected)
    # The judge's context: the retriever's documents where a setup has a retriever, else the
    # answer's LLM call input, which holds the documents pasted into the system prompt.
    judged_data = {data["answer"]: data for data in (
        read_data(call.request["messages"]) for call in calls if call.answer != PROBE)}
    for trace_id, (name, a) in expected.items():
        [verdict] = verdicts[trace_id]  # once
        assert verdict["verdict"] == EXPECTED_VERDICT.get(a.case.case_id, "pass"), (name, a)
        assert verdict["assembly"]["root_seen"] is True  # the web handler's span
        trace = delivered.traces[trace_id]
        if name in ANSWER_SPAN:  # the answer's span (the chat span: its log records' own)
            assert verdict["span_id"] == trace.span(ANSWER_SPAN[name]).span_id, name
        elif name in TOOL_SETUPS:  # the second chat span, the one that answered
            assert verdict["span_id"] == trace.named("chat gpt-4o-mini")[-1].span_id, name
        else:
            assert verdict["span_id"] in {span.span_id for span in trace.spans}, name
        contents = [doc["content"] for doc in judged_data[a.answer]["documents"]]
        if name in RETRIEVER_SETUPS:
            assert verdict["context_source"] == "retrieval", (name, verdict)
            # All three, once each, in the retriever span's order.
            assert contents == list(WHERE[name](trace).documents), name
        elif name in TOOL_SETUPS:  # the answering call's input: the tool's result in it
            assert verdict["context_source"] == "llm_input", (name, verdict)
            assert contents == [*a.case.documents, TOOL_PROMPT, a.case.question], name
        else:
            assert verdict["context_source"] == "llm_input", (name, verdict)
            assert all(any(doc in content for content in contents)
                       for doc in a.case.documents), name
    assert tracebacks(worker.log()) == []
