"""Collecting the stdlib ``logging`` records that reach one logger's handlers."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class _Collect(logging.Handler):
    def __init__(self, into: list[logging.LogRecord]) -> None:
        super().__init__()
        self._into = into

    def emit(self, record: logging.LogRecord) -> None:
        self._into.append(record)


@contextmanager
def collected_records(logger_name: str) -> Iterator[list[logging.LogRecord]]:
    """The records that reach ``logger_name``'s handlers while the block runs."""
    records: list[logging.LogRecord] = []
    handler = _Collect(records)
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
