"""The worker's exceptions, one tree.

    WorkerError
    ├── ConfigError            bad configuration: refuse to start, exit 2
    ├── DecodeError            a record is not a valid trace: dead-letter it
    ├── PublishError           the broker did not take an outcome: retry, never commit past
    ├── JudgeError             the judge could not score one trace: an ``error`` verdict
    └── JudgeUnavailable       the judge fails for everyone: hold, back off, never commit past

``JudgeUnavailable`` is a sibling of ``JudgeError``, not a kind of it: an ``except JudgeError``
must never swallow an outage. A ``JudgeError`` stays inside the judge (the answer parser raises
it); what leaves the judge is a value, ``judge.result.TraceFailed``, never the exception.

Foreign exceptions are mapped into this tree in one place per library: openai and httpx in
``consumer/judge/failures.py``, aiokafka in ``consumer/kafka/errors.py``.
"""

from __future__ import annotations


class WorkerError(Exception):
    """Base of every error the worker raises on purpose."""


class ConfigError(WorkerError):
    """The environment holds a value the worker cannot run with (one line, no secret)."""


class DecodeError(WorkerError):
    """The record's bytes are not a valid trace event; ``reason`` says why in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PublishError(WorkerError):
    """The broker did not acknowledge a verdict or dead letter (it may be down)."""


class JudgeError(WorkerError):
    """The judge could not decide for this trace; becomes an ``error`` verdict."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class JudgeUnavailable(WorkerError):
    """The judge is failing for everyone (refused, 5xx, 429 storm): not this trace's fault."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
