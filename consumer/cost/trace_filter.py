"""``TRACE_FILTER``: a JMESPath expression over a trace; only traces it holds true for are
judged (pure, but for one log line).

The expression sees one view, the same for a ``trace_json`` event and a trace assembled from
spans (``filter_view``): the trace event's fields as JSON (``trace_id``, ``input``,
``output``, ``retrieved_documents``, ``expected_output``, ``project_id``, ``timestamp``,
``metadata``, ``tools_available``, ``tool_calls``, ``agent``, ...), every field present (null
when unset), plus

    session_id   the session attribute of a trace from spans; null for ``trace_json``
    service      the resource's ``service.name`` of a trace from spans; for
                 ``trace_json``, ``metadata["service.name"]``, else ``metadata["service"]``,
                 when a string; null otherwise

and, for a trace from spans, ``metadata.environment`` from the resource's
``deployment.environment.name`` (or the older ``deployment.environment``), so one expression
selects an environment in both formats.

A trace from spans takes ``project_id`` from its origin (the project attribute, else
``service.name``), as its verdict does. Examples::

    project_id == 'checkout'                          one project
    metadata.environment == 'production'              an environment the producer sets
    service == 'support-bot'                          one service
    length(retrieved_documents || `[]`) > `0`         only answers with documents

A trace is kept when the result is truthy as JMESPath defines it: false, null, an empty
string, list or object are false; everything else (0 included) is true.

A malformed expression is refused when compiled, in one line naming the position (counted
from 0, as JMESPath counts). So are an unknown function and a wrong number of arguments,
which JMESPath itself reports only when it evaluates a call (a filter that would fail on
every trace is a configuration error). An expression that fails on one trace
(``length(metadata.tags)`` where a producer sent a number) leaves that trace out: it is
counted in ``TraceFilter.errors`` and the first failure is logged, with the function and the
types involved, never the trace's values.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

import jmespath
import structlog
from jmespath.exceptions import (
    IncompleteExpressionError,
    JMESPathError,
    JMESPathTypeError,
    LexerError,
    ParseError,
)
from jmespath.functions import Functions
from jmespath.lexer import Lexer
from jmespath.parser import ParsedResult

from consumer.telemetry.origin import TraceOrigin
from schemas.trace import TraceEvent

log = structlog.get_logger(__name__)

SETTING = "TRACE_FILTER"
# Metadata keys a trace_json producer names its service with, in order.
SERVICE_METADATA_KEYS = ("service.name", "service")


class TraceFilter:
    """A compiled ``TRACE_FILTER``: ``keeps(view)`` for each trace; failures counted."""

    def __init__(self, expression: str, parsed: ParsedResult) -> None:
        self.expression = expression
        self._parsed = parsed
        self.errors = 0  # traces left out because the expression failed on them

    def keeps(self, view: Mapping[str, Any]) -> bool:
        """True when the expression is truthy on the view; False when it fails on it."""
        try:
            return _truthy(self._parsed.search(view))
        except Exception as exc:  # one trace's data must not stop the worker
            return self._failed(view.get("trace_id"), exc)

    def keeps_trace(self, trace: TraceEvent, origin: TraceOrigin | None) -> bool:
        """``keeps`` on the trace's view; False, counted, when not even the view can be made
        (metadata nested deeper than serialising allows)."""
        try:
            view = filter_view(trace, origin)
        except (ValueError, RecursionError) as exc:
            return self._failed(trace.trace_id, exc)
        return self.keeps(view)

    def _failed(self, trace_id: Any, exc: Exception) -> bool:
        self.errors += 1
        if self.errors == 1:
            # The expression says which filter (TRACE_FILTER or a rule's) it is: each logs once.
            log.warning("trace_filter_failed", trace_id=str(trace_id)[:200],
                        expression=self.expression[:200], problem=_describe(exc),
                        note="traces the filter fails on are not judged; logged once")
        return False


def compile_filter(expression: str) -> TraceFilter:
    """The filter, or ValueError with one line naming what is wrong and where."""
    if not expression.strip():
        raise ValueError(f"{SETTING}: the expression is empty")
    try:
        with _quietly():
            parsed = jmespath.compile(expression)
    except JMESPathError as exc:
        raise ValueError(f"{SETTING}: {_syntax_problem(exc, expression)}") from None
    except RecursionError:  # nesting deep enough to exhaust the parser's stack
        raise ValueError(f"{SETTING}: the expression is nested too deeply") from None
    _check_calls(cast(dict[str, Any], parsed.parsed), expression)
    return TraceFilter(expression, parsed)


def filter_view(trace: TraceEvent, origin: TraceOrigin | None) -> dict[str, Any]:
    """What the expression sees of one trace (module docstring); ``origin`` is given for a
    trace from spans, None for a ``trace_json`` event."""
    view: dict[str, Any] = trace.model_dump(mode="json")
    view["session_id"] = None
    view["service"] = _metadata_service(trace.metadata)
    if origin is not None:
        view["project_id"] = origin.project_id
        view["session_id"] = origin.session_id
        view["service"] = origin.service
        if origin.environment is not None:  # as a trace_json producer would write it
            view["metadata"] = {**(view["metadata"] or {}), "environment": origin.environment}
    return view


def _metadata_service(metadata: dict[str, Any] | None) -> str | None:
    for key in SERVICE_METADATA_KEYS:
        value = (metadata or {}).get(key)
        if isinstance(value, str):
            return value
    return None


def _truthy(value: Any) -> bool:
    # JMESPath's false values; 0 is true (unlike Python's).
    return not (value is None or value is False or value in ("", [], {}))


def _syntax_problem(exc: JMESPathError, expression: str) -> str:
    if isinstance(exc, IncompleteExpressionError):
        return f"syntax error at position {len(expression)}: the expression ends too soon"
    if isinstance(exc, LexerError):  # "Unclosed ' delimiter", "Unknown token '='"
        message = _one_line(exc.message)
        return f"syntax error at position {exc.lexer_position}: {message[:1].lower()}{message[1:]}"
    if isinstance(exc, ParseError):
        if exc.token_type == "EOF":  # noqa: S105 - a token type, not a password
            return f"syntax error at position {exc.lex_position}: the expression ends too soon"
        return f"syntax error at position {exc.lex_position}: unexpected token {exc.token_value!r}"
    return f"syntax error: {_one_line(str(exc))}"


def _check_calls(node: dict[str, Any], expression: str) -> None:
    """Refuse calls JMESPath would refuse on every trace: unknown names, wrong arity."""
    for name, given in _calls(node):
        entry = Functions.FUNCTION_TABLE.get(name)
        where = _call_position(expression, name)
        if entry is None:
            raise ValueError(f"{SETTING}: unknown function {name}() at position {where}")
        signature = entry["signature"]
        variadic = bool(signature) and bool(signature[-1].get("variadic"))
        if given < len(signature) or (given > len(signature) and not variadic):
            wanted = f"at least {len(signature)}" if variadic else str(len(signature))
            raise ValueError(f"{SETTING}: {name}() takes {wanted} argument(s), {given} given, "
                             f"at position {where}")


def _calls(node: dict[str, Any]) -> Iterator[tuple[str, int]]:
    stack = [node]
    while stack:  # iterative: the parser already bounded the depth, this adds no recursion
        current = stack.pop()
        if current.get("type") == "function_expression":
            yield current["value"], len(current["children"])
        stack.extend(child for child in current.get("children", []) if isinstance(child, dict))


def _call_position(expression: str, name: str) -> int:
    """Where the first call of ``name`` starts (the expression lexed without error before)."""
    with _quietly():
        tokens = list(Lexer().tokenize(expression))
    for token, following in itertools.pairwise(tokens):
        if (token["type"] == "unquoted_identifier" and token["value"] == name
                and following["type"] == "lparen"):
            return int(token["start"])
    return 0


@contextmanager
def _quietly() -> Iterator[None]:
    # JMESPath still reads `text` that is not JSON as the string 'text', with a
    # PendingDeprecationWarning on stderr: read as the library reads it, without the noise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        yield


def _describe(exc: Exception) -> str:
    """A failure without the values it met (they are the application's data)."""
    if isinstance(exc, JMESPathTypeError):
        return (f"{exc.function_name}() got {exc.actual_type}, expected one of "
                f"{', '.join(exc.expected_types)}")
    return type(exc).__name__


def _one_line(text: str) -> str:
    return " ".join(text.split())
