"""A batch replay's requests, spooled to disk: one JSONL line each, read back when asked.

A window may hold 100,000 traces and more, and a judge request is up to some 30 kB (12
documents of 2,000 characters, escaped twice), so the lines of a whole window would not fit
in memory: they are appended to an anonymous temporary file beside the state file (gone when
closed, or when the process dies), and only each request's offset and length are kept (about
250 bytes a request, its key included). ``BatchRunner`` reads them as a mapping of custom id
to line, one batch file's lines at a time. Identical requests (the same custom id, the digest
of what the judge sees) are written once.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType

from consumer.replay.batch.requests import BatchLine


class RequestSpool(Mapping[str, BatchLine]):
    """Batch lines by custom id, on disk; a context manager that deletes them on exit."""

    def __init__(self, directory: Path) -> None:
        # Unlinked at once (O_TMPFILE where the filesystem has it): nothing is left behind.
        self._file = tempfile.TemporaryFile(  # noqa: SIM115 - open as long as the spool
            dir=directory, prefix=".batch-requests-")
        self._where: dict[str, tuple[int, int]] = {}  # custom id -> (offset, length)
        self._end = 0

    def add(self, line: BatchLine) -> bool:
        """Keep ``line`` unless its custom id is here already; True if it was added."""
        if line.custom_id in self._where:
            return False
        self._file.seek(self._end)
        self._file.write(line.data)
        self._where[line.custom_id] = (self._end, len(line.data))
        self._end += len(line.data)
        return True

    def __getitem__(self, custom_id: str) -> BatchLine:
        offset, length = self._where[custom_id]
        self._file.seek(offset)
        return BatchLine(custom_id, self._file.read(length))

    def __contains__(self, custom_id: object) -> bool:
        return custom_id in self._where  # no read from disk

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    @property
    def size_bytes(self) -> int:
        """The size of every line kept."""
        return self._end

    def close(self) -> None:
        """Delete the lines."""
        self._file.close()

    def __enter__(self) -> RequestSpool:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
