"""``answered_without_tool@v1``: did a model that had tools answer without calling one? No model.

Applies to a trace with an answer whose model had tools: tools offered on its call
(``tools_available``: from spans ``llm.tools.*``, ``gen_ai.tool.definitions``), a tool call
(only a model with tools makes one), or an agent (``agent``: an AGENT / ``invoke_agent`` span;
an agent works with tools even when the trace lists none). Passes when a tool was called
anywhere in the trace (``tool_calls``: a TOOL / ``execute_tool`` span, or a call the model
asked for in an output message), even one that failed: the model did not answer from memory,
and the reason says the call failed. Fails otherwise, naming the tools that were available.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from consumer.redaction import known_secrets, redact
from consumer.rules.base import Outcome
from consumer.telemetry.origin import TraceOrigin
from schemas.trace import ToolCall, TraceEvent

MAX_NAMED_TOOLS = 10
MAX_NAME_CHARS = 64
MAX_ERROR_CHARS = 120


class AnsweredWithoutTool:
    """Fails an answer given without a tool call by a model that had tools."""

    name = "answered_without_tool"
    version = "v1"

    def __init__(self, secrets: Sequence[str] = ()) -> None:
        self.secrets = known_secrets(secrets)  # out of the names and errors quoted, before cuts

    def applies(self, trace: TraceEvent, origin: TraceOrigin | None) -> bool:
        """An answer, and a model that had tools."""
        return trace.has_output and bool(trace.tools_available or trace.tool_calls or trace.agent)

    def check(self, trace: TraceEvent, origin: TraceOrigin | None) -> Outcome:
        """Pass when a tool was called, naming the calls (and any that failed)."""
        calls = trace.tool_calls or []
        if calls:
            count = len(calls)
            reason = (f"made {count} tool call{'s' if count != 1 else ''}: "
                      f"{_names((call.name for call in calls), self.secrets)}")
            failed = [call for call in calls if call.failed]
            if failed:
                reason += f"; {len(failed)} failed: " + ", ".join(
                    _failure(call, self.secrets) for call in failed[:3])
            return Outcome(True, reason)
        available = trace.tools_available or []
        if not available:
            return Outcome(False, "an agent answered without calling a tool "
                                  "(the trace does not list its tools)")
        count = len(dict.fromkeys(available))
        named = _names(available, self.secrets)
        return Outcome(False, f"answered without calling a tool; {count} "
                              f"{'was' if count == 1 else 'were'} available: {named}")


def _names(names: Iterable[str], secrets: Sequence[str]) -> str:
    """Each name once, in order, cut; past ``MAX_NAMED_TOOLS``, how many more."""
    unique = list(dict.fromkeys(names))
    shown = ", ".join(_cut(name, MAX_NAME_CHARS, secrets) for name in unique[:MAX_NAMED_TOOLS])
    more = len(unique) - MAX_NAMED_TOOLS
    return f"{shown} and {more} more" if more > 0 else shown


def _failure(call: ToolCall, secrets: Sequence[str]) -> str:
    error = call.error if isinstance(call.error, str) else json.dumps(call.error, sort_keys=True)
    return f"{_cut(call.name, MAX_NAME_CHARS, secrets)} ({_cut(error, MAX_ERROR_CHARS, secrets)})"


def _cut(text: str, limit: int, secrets: Sequence[str]) -> str:
    # Redacted before the cut: a secret cut in two would no longer be found whole.
    text = " ".join(redact(text, secrets).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"
