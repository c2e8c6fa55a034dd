"""structlog set-up: JSON (or console) lines, with every known secret redacted."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any, TextIO, cast

import structlog

from consumer.redaction import REDACTED, known_secrets, redact

_SECRET_KEYS = ("api_key", "password", "secret", "authorization")


def configure_logging(level: str, fmt: str, secrets: Iterable[str] = ()) -> None:
    """Route structlog and stdlib logging to stderr, one event a line."""
    known = known_secrets(secrets)

    def redact_secrets(
        _: Any, __: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        for key, value in event.items():
            if any(part in key.lower() for part in _SECRET_KEYS):
                event[key] = REDACTED
            elif known:
                event[key] = _scrub(value, known)
        return event

    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        redact_secrets,
    ]
    numeric = logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=False,
    )
    # Library loggers (aiokafka, openai, httpx) go through the same pipeline and redaction.
    handler = logging.StreamHandler(_CurrentStderr())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[structlog.stdlib.ExtraAdder(), *shared],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(numeric, logging.WARNING))


class _CurrentStderr:
    """Whatever ``sys.stderr`` is at write time (it is swapped by test runners and tools).

    A line that cannot be written is dropped: stderr may be a pipe whose reader is gone
    (``groundedness run 2>&1 | head``), and a log call that raised there would stop whatever
    logged it, the drain a SIGTERM starts among them.
    """

    def write(self, text: str) -> int:
        try:
            return sys.stderr.write(text)
        except (OSError, ValueError):  # a closed pipe; a closed file (ValueError)
            return 0

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()


def _scrub(value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, BaseException):
        return _scrub(f"{type(value).__name__}: {value}", secrets)
    if isinstance(value, dict):
        return {k: _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v, secrets) for v in value]
    return value
