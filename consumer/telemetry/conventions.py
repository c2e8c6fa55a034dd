"""One trace's GenAI spans -> the answer, its context and its tools, by the contract's
precedence (DESIGN.md, "Telemetry input"; first match wins) (pure).

answer     ``langfuse.trace.output``; the outermost GenAI span's ``output.value``; the
           last-ending LLM / chat span's assistant text
input      ``langfuse.trace.input``; the outermost GenAI span's ``input.value``; the first LLM
           span's last user message
documents  the last RERANKER's output documents; else every retriever's, in start order
           (OpenInference RETRIEVER ``retrieval.documents``; GenAI ``retrieval``
           ``gen_ai.retrieval.documents`` items with content; OpenLLMetry's
           ``vector_db_retrieve`` output); else the documents OpenLLMetry steps returned
           (``openllmetry.py``), each text once; none with text: the answer's LLM call input
           (the tools' results first, what the model answered from; then its system and
           user messages, each text once)

The outermost span is the one span with no ancestor among the kept spans. When several have
none (the real root, an HTTP span, was dropped and the GenAI work under it is in pieces), no
single span speaks for the trace, and the LLM calls decide.

The outermost span's values count only when they are text. This refines DESIGN.md's
precedence (the outermost span's ``output.value`` first) for values that are not: one that is
a Python object's repr (``attributes.is_object_repr``; LlamaIndex workflows, ``FunctionAgent``
among them, record their run's result as ``StopEvent(result=AgentOutput(...), ...)``) is
passed over, and the next rule decides (the LLM calls). The same run's ``input.value``, a JSON
dump of the workflow's state, holds no question key: ``value_text`` passes it over already.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence

from openinference.semconv.resource import ResourceAttributes
from openinference.semconv.trace import (
    OpenInferenceSpanKindValues,
    RerankerAttributes,
    SpanAttributes,
)

from consumer.telemetry import genai, openinference, openllmetry
from consumer.telemetry.attributes import (
    ASSISTANT_ROLES,
    INPUT_KEYS,
    OUTPUT_KEYS,
    SYSTEM_ROLES,
    TOOL_ROLES,
    USER_ROLES,
    is_object_repr,
    text,
    value_text,
)
from consumer.telemetry.mapped_trace import ContextSource, MappedTrace, Message, ToolCall
from consumer.telemetry.returned_documents import tool_result_documents
from consumer.telemetry.spans import Span
from schemas.trace import Document

LANGFUSE_TRACE_INPUT = "langfuse.trace.input"  # Langfuse publishes no constants package
LANGFUSE_TRACE_OUTPUT = "langfuse.trace.output"
SERVICE_NAME = "service.name"  # OTel's stable resource attribute

_LLM = OpenInferenceSpanKindValues.LLM.value
_RETRIEVER = OpenInferenceSpanKindValues.RETRIEVER.value
_RERANKER = OpenInferenceSpanKindValues.RERANKER.value
_TOOL = OpenInferenceSpanKindValues.TOOL.value
_AGENT = OpenInferenceSpanKindValues.AGENT.value


def is_llm_span(span: Span) -> bool:
    """An LLM call: OpenInference kind LLM; GenAI chat / text_completion / generate_content; or,
    from instrumentations older than ``gen_ai.operation.name`` (OpenLLMetry), a span with no
    kind and no operation that carries GenAI messages."""
    kind, operation = openinference.kind(span), genai.operation(span)
    if kind is not None or operation is not None:
        return kind == _LLM or operation in genai.LLM_OPERATIONS
    return bool(genai.output_messages(span) or genai.input_messages(span))


def map_trace(spans: Sequence[Span], let_go: Collection[str] = ()) -> MappedTrace | None:
    """The trace read for judging, or None when it is no candidate (no LLM call, and not an
    answer with retrieved documents: indexing work, or no GenAI span at all). ``let_go``: ids
    of GenAI spans of the trace that assembly did not keep (over its bounds); their children
    are not the trace's outermost spans."""
    if not spans:
        return None
    ordered = sorted(spans, key=lambda s: (s.start_unix_nano, s.end_unix_nano, s.span_id))
    by_end = sorted(spans, key=lambda s: (s.end_unix_nano, s.start_unix_nano, s.span_id))
    llm_calls = [span for span in ordered if is_llm_span(span)]
    outermost = _outermost(ordered, let_go)
    answer, answer_span = _answer(by_end, outermost, llm_calls)
    found = answer is not None or _answer_recorded(ordered, outermost, llm_calls)
    documents = _documents(ordered, by_end)
    if not llm_calls and not (answer and documents):
        return None
    source: ContextSource = "retrieval"
    if not documents:
        source = "llm_input"
        documents = _llm_input_context(answer_span, llm_calls, by_end)
    executed, asked = _tool_calls(ordered, by_end)
    tool_calls = _merge_tool_calls(executed, asked)
    defined = [name for span in ordered for name in _tool_definitions(span)]
    return MappedTrace(
        trace_id=ordered[0].trace_id,
        answer=answer or "",
        answer_span_id=answer_span.span_id if answer_span is not None else None,
        input=_input(by_end, outermost, llm_calls),
        documents=tuple(documents),
        context_source=source,
        tool_calls=tuple(tool_calls),
        tools_available=tuple(dict.fromkeys([*defined, *(call.name for call in tool_calls)])),
        agent=any(_is_agent(span) for span in ordered),
        project_id=_project(outermost, ordered),
        session_id=_first_text(ordered, SpanAttributes.SESSION_ID, genai.GEN_AI_CONVERSATION_ID),
        start_unix_nano=ordered[0].start_unix_nano,
        answer_found=found,
    )


def _outermost(ordered: Sequence[Span], let_go: Collection[str]) -> Span | None:
    ids = {span.span_id for span in ordered}
    tops = [span for span in ordered
            if span.parent_span_id not in ids and span.parent_span_id not in let_go]
    return tops[0] if len(tops) == 1 else None


def _answer(by_end: Sequence[Span], outermost: Span | None,
            llm_calls: Sequence[Span]) -> tuple[str | None, Span | None]:
    # Langfuse merges trace updates, the latest winning: the last-ending span that set it.
    for span in reversed(by_end):
        found = value_text(span.attributes.get(LANGFUSE_TRACE_OUTPUT), is_json=True,
                           keys=OUTPUT_KEYS, roles=ASSISTANT_ROLES)
        if found is not None:
            return found, span
    if (found := _outermost_text(outermost, openinference.output_text)) is not None:
        return found, outermost
    ending = sorted(llm_calls, key=lambda s: (s.end_unix_nano, s.start_unix_nano, s.span_id))
    for span in reversed(ending):
        if (found := _assistant_text(span)) is not None:
            return found, span
    return None, None


def _answer_recorded(ordered: Sequence[Span], outermost: Span | None,
                     llm_calls: Sequence[Span]) -> bool:
    """Did any place ``_answer`` reads hold a value, even one without text? False tells a
    trace whose answer was recorded nowhere (``no_answer_found``) from one whose answer is
    empty (``empty_output``)."""
    return (any(LANGFUSE_TRACE_OUTPUT in span.attributes for span in ordered)
            or (outermost is not None
                and SpanAttributes.OUTPUT_VALUE in outermost.attributes)
            or any(openinference.records_output(span) or genai.records_output(span)
                   for span in llm_calls))


def _input(by_end: Sequence[Span], outermost: Span | None,
           llm_calls: Sequence[Span]) -> str | None:
    for span in reversed(by_end):
        found = value_text(span.attributes.get(LANGFUSE_TRACE_INPUT), is_json=True,
                           keys=INPUT_KEYS, roles=USER_ROLES)
        if found is not None:
            return found
    if (found := _outermost_text(outermost, openinference.input_text)) is not None:
        return found
    for span in llm_calls:
        users = [m.content for m in _llm_input(span) if m.role in USER_ROLES]
        if users:
            return users[-1]
    return None


def _outermost_text(outermost: Span | None,
                    read: Callable[[Span], str | None]) -> str | None:
    """The outermost span's value as ``read`` finds it, unless it is an object's repr. Only
    here, where the LLM calls can still speak: an LLM call's reply that happens to read like a
    repr is its reply all the same, and no rule comes after it."""
    found = read(outermost) if outermost is not None else None
    return None if found is None or is_object_repr(found) else found


def _llm_input(span: Span) -> list[Message]:
    return (openinference.input_messages(span) or genai.input_messages(span)
            or openinference.prompts(span))


def _assistant_text(span: Span) -> str | None:
    messages = openinference.output_messages(span) or genai.output_messages(span)
    # A message without a role is the model's: some instrumentations record only the content.
    found = next((m.content for m in messages if m.role in ASSISTANT_ROLES or not m.role), None)
    # A completion call (prompts in, text out) records its reply only as ``output.value``;
    # a chat call's ``output.value`` is the raw response, whose JSON holds no answer key.
    return found if found is not None or messages else openinference.output_text(span)


def _documents(ordered: Sequence[Span], by_end: Sequence[Span]) -> list[Document]:
    # The last reranker that ran decides what the model saw, even when it kept nothing
    # (LlamaIndex then answers a canned "Empty Response" without calling the model); one that
    # recorded no documents at all says nothing, and the retrievers' documents stand.
    for span in reversed(by_end):
        if openinference.kind(span) == _RERANKER:
            kept = openinference.documents(span.attributes,
                                           RerankerAttributes.RERANKER_OUTPUT_DOCUMENTS)
            if kept or openinference.documents(span.attributes,
                                               RerankerAttributes.RERANKER_INPUT_DOCUMENTS):
                return kept
    retrieved = [document for span in ordered if _is_retriever(span)
                 for document in _retriever_documents(span)]
    if retrieved:
        return retrieved
    # No retriever span with text: OpenLLMetry steps whose output is documents (a chain or a
    # decorated task that retrieved). Nested steps hand the same documents up (a chain
    # returns its retriever's list), so each text counts once, at its first step.
    once: dict[str, Document] = {}
    for span in ordered:
        if openllmetry.is_traceloop(span) and not _is_retriever(span):
            for document in openllmetry.output_documents(
                    span, retrieved=openllmetry.names_retrieval(span)):
                once.setdefault(document.content, document)
    return list(once.values())


def _is_retriever(span: Span) -> bool:
    """An OpenInference RETRIEVER, a GenAI ``retrieval`` operation, or OpenLLMetry's
    ``vector_db_retrieve`` (its LangChain retriever span)."""
    return (openinference.kind(span) == _RETRIEVER
            or genai.operation(span) in (genai.RETRIEVAL, openllmetry.VECTOR_DB_RETRIEVE))


def _retriever_documents(span: Span) -> list[Document]:
    """A retriever's documents with text, from the first convention that has them."""
    return (openinference.documents(span.attributes, SpanAttributes.RETRIEVAL_DOCUMENTS)
            or genai.retrieval_documents(span)
            or openllmetry.output_documents(span, retrieved=True))


def _llm_input_context(answer_span: Span | None, llm_calls: Sequence[Span],
                       by_end: Sequence[Span]) -> list[Document]:
    """The tool results, system and user messages of the call that answered (else the
    last-ending call): the model's context when no retriever recorded documents (the tools
    the model called returned them, or the prompt carries them). The tools' results come
    first: the judge reads the first ``MAX_DOCUMENTS``, and a long conversation's turns
    would push the evidence out. A result that is a list of documents is one document each,
    and every result counts (two calls that returned the same are two facts); the system and
    user texts count once each (OpenLIT records the system prompt both as
    ``gen_ai.system_instructions`` and as the first input message)."""
    call = answer_span if answer_span is not None and is_llm_span(answer_span) else next(
        (span for span in reversed(by_end) if is_llm_span(span)), None)
    if call is None:
        return []
    messages = _llm_input(call)
    tools = [found.model_copy(update={"metadata": {**(found.metadata or {}), "role": m.role}})
             for m in messages if m.role in TOOL_ROLES
             for found in tool_result_documents(m.content)]
    prompt: dict[str, Document] = {}
    for m in messages:
        if m.role in SYSTEM_ROLES | USER_ROLES:
            prompt.setdefault(m.content, Document(content=m.content, metadata={"role": m.role}))
    return [*tools, *prompt.values()]


def _tool_calls(ordered: Sequence[Span],
                by_end: Sequence[Span]) -> tuple[list[ToolCall], list[ToolCall]]:
    executed = [
        openinference.tool_span_call(span) if openinference.kind(span) == _TOOL
        else genai.tool_span_call(span)
        for span in ordered
        if openinference.kind(span) == _TOOL or genai.operation(span) == genai.EXECUTE_TOOL
    ]
    asked = [
        call for span in by_end if is_llm_span(span)
        for call in [*openinference.output_tool_calls(span), *genai.output_tool_calls(span)]
    ]
    return executed, asked


def _merge_tool_calls(executed: list[ToolCall], asked: list[ToolCall]) -> list[ToolCall]:
    """Each call once: a model's request that a tool span ran (same call id; without ids, the
    same name, first come) is that span's call; a request nothing ran is kept on its own."""
    merged, pending = list(executed), list(executed)
    for request in asked:
        match = next(
            (run for run in pending if request.call_id and run.call_id == request.call_id),
            None,
        ) or next(
            (run for run in pending if run.name == request.name
             and not (run.call_id and request.call_id)),
            None,
        )
        if match is None:
            merged.append(request)
        else:
            pending.remove(match)
    return merged


def _tool_definitions(span: Span) -> list[str]:
    return [*openinference.tool_definitions(span), *genai.tool_definitions(span)]


def _is_agent(span: Span) -> bool:
    return openinference.kind(span) == _AGENT or genai.operation(span) == genai.INVOKE_AGENT


def _project(outermost: Span | None, ordered: Sequence[Span]) -> str | None:
    spans = [outermost, *ordered] if outermost is not None else ordered
    for key in (ResourceAttributes.PROJECT_NAME, SERVICE_NAME):
        for span in spans:
            if (found := text(span.resource.get(key))) is not None:
                return found
    return None


def _first_text(spans: Iterable[Span], *keys: str) -> str | None:
    listed = list(spans)
    for key in keys:
        for span in listed:
            if (found := text(span.attributes.get(key))) is not None:
                return found
    return None
