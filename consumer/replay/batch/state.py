"""A batch replay's state on disk: a JSON file, so a stopped or crashed replay resumes.

It records the replay it belongs to (topic, window, model), each group of requests sent as one
batch (their custom ids, the uploaded file, the batch, the batch's last status, whether an
expired batch's requests were sent again) and the custom ids whose verdicts were published.
Every change is written at once, atomically (a temporary file beside it, then ``os.replace``),
so a crash at any point leaves the state before the change or after it, never half. What a
crash can make the next run repeat, and why nothing is paid or published twice:

- planned, not yet uploaded: uploaded again (a file uploaded but not recorded is a stray;
  files cost nothing);
- uploaded, the batch not yet recorded: the runner looks for a batch on that file before it
  creates one;
- a batch finished, not all its verdicts published: its results are read again, and the ids
  already published are left out.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from consumer.errors import ConfigError

STATE_FORMAT = "groundedness-batch-replay/1"
FINISHED = frozenset({"completed", "expired", "failed", "cancelled"})


class BatchStateError(ConfigError):
    """The state file cannot be used for this replay (unreadable, or another replay's): one
    line naming the file and why."""


@dataclass(frozen=True, slots=True)
class Scope:
    """The replay a state file belongs to."""

    topic: str
    window_from: str  # ISO 8601, as given to ``--from``
    window_to: str | None  # None: up to the end of the topic when the replay started
    model: str

    def describe(self) -> str:
        """``TOPIC from A to B (model M)``, for messages."""
        return (f"{self.topic} from {self.window_from} to {self.window_to or 'the end'} "
                f"(model {self.model})")


def default_state_path(scope: Scope, directory: Path = Path()) -> Path:
    """The state file named after the topic and window, in ``directory``."""
    name = f"batch-{scope.topic}-{scope.window_from}-{scope.window_to or 'end'}"
    return directory / (re.sub(r"[^\w.-]+", "_", name) + ".json")


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """One group of requests sent as one batch, and how far it got."""

    key: str  # "1", "2", ... in the order planned
    custom_ids: tuple[str, ...]
    attempt: int = 1  # 2 and up: an expired batch's requests, sent again
    file_id: str | None = None
    uploaded_at: int | None = None  # the file's created_at (a batch on it is not older)
    batch_id: str | None = None
    status: str = "planned"  # planned, uploaded, then the batch's own status
    resubmitted: bool = False  # this expired batch's unanswered requests went to a new one

    @property
    def finished(self) -> bool:
        """The batch reached a final status."""
        return self.status in FINISHED


class BatchState:
    """The records of one replay's batches, written to ``path`` after every change."""

    def __init__(
        self,
        path: Path,
        scope: Scope,
        records: Sequence[BatchRecord] = (),
        published: Iterable[str] = (),
    ) -> None:
        self.path = path
        self.scope = scope
        self._records: list[BatchRecord] = []
        self._owners: dict[str, str] = {}  # custom id -> the key of the latest record with it
        self._published = set(published)
        for record in records:
            self._append(record)

    @classmethod
    def open(cls, path: Path, scope: Scope) -> BatchState:
        """The state at ``path`` (a new one if there is no file); ``BatchStateError`` if the
        file is unreadable or belongs to another replay."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(path, scope)
        except (OSError, UnicodeDecodeError) as exc:
            raise BatchStateError(f"cannot read the batch state {path}: {exc}") from None
        state = _parse(path, text)
        if state.scope != scope:
            raise BatchStateError(
                f"{path} is the batch state of {state.scope.describe()}, not of "
                f"{scope.describe()}: pass another --batch-state"
            )
        return state

    @property
    def records(self) -> tuple[BatchRecord, ...]:
        """Every record, in the order planned."""
        return tuple(self._records)

    @property
    def published(self) -> frozenset[str]:
        """The custom ids whose verdicts were published."""
        return frozenset(self._published)

    def planned(self) -> set[str]:
        """Every custom id in some record."""
        return set(self._owners)

    def owner(self, custom_id: str) -> str | None:
        """The key of the latest record holding ``custom_id`` (an expired batch's requests
        belong to the batch they were sent again in)."""
        return self._owners.get(custom_id)

    def add(self, groups: Sequence[Sequence[str]], attempt: int = 1) -> list[BatchRecord]:
        """New records for ``groups`` of custom ids (one batch each), written."""
        added = self._new(groups, attempt)
        self.save()
        return added

    def update(self, record: BatchRecord) -> None:
        """Replace the record with ``record.key``, written."""
        self._put(record)
        self.save()

    def resubmit(self, expired: BatchRecord, groups: Sequence[Sequence[str]]) -> list[BatchRecord]:
        """An expired batch's unanswered requests in new records, and the expired one marked,
        written at once (a crash resubmits them once or not at all)."""
        self._put(replace(expired, resubmitted=True))
        added = self._new(groups, expired.attempt + 1)
        self.save()
        return added

    def mark_published(self, custom_ids: Iterable[str]) -> None:
        """Record that these verdicts were published, written."""
        self._published.update(custom_ids)
        self.save()

    def save(self) -> None:
        """Write the state atomically."""
        document = {
            "format": STATE_FORMAT,
            "scope": asdict(self.scope),
            "batches": [
                {**asdict(record), "custom_ids": list(record.custom_ids)}
                for record in self._records
            ],
            "published": sorted(self._published),
        }
        self._write(json.dumps(document, ensure_ascii=False, indent=1) + "\n")

    def _write(self, text: str) -> None:
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            with temporary.open("w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())  # on disk before it replaces the last state
            os.replace(temporary, self.path)
        finally:
            temporary.unlink(missing_ok=True)

    def _new(self, groups: Sequence[Sequence[str]], attempt: int) -> list[BatchRecord]:
        added = []
        for ids in groups:
            record = BatchRecord(str(len(self._records) + 1), tuple(ids), attempt)
            self._append(record)
            added.append(record)
        return added

    def _append(self, record: BatchRecord) -> None:
        self._records.append(record)
        self._owners.update(dict.fromkeys(record.custom_ids, record.key))

    def _put(self, record: BatchRecord) -> None:
        index = next(i for i, r in enumerate(self._records) if r.key == record.key)
        self._records[index] = record


def _parse(path: Path, text: str) -> BatchState:
    """A state file's contents, or ``BatchStateError`` saying in one line what is wrong."""
    try:
        document = json.loads(text)
        if not isinstance(document, dict) or document.get("format") != STATE_FORMAT:
            raise ValueError(f"its format is not {STATE_FORMAT}")
        scope = Scope(**_fields(document["scope"], Scope.__dataclass_fields__))
        records = [_record(item) for item in document["batches"]]
        published = document["published"]
        if not isinstance(published, list) or not all(isinstance(p, str) for p in published):
            raise ValueError("published is not a list of ids")
    except (ValueError, KeyError, TypeError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BatchStateError(f"{path} is not a batch state file: {detail}") from None
    return BatchState(path, scope, records, published)


def _record(item: Any) -> BatchRecord:
    fields = _fields(item, BatchRecord.__dataclass_fields__)
    ids = fields.get("custom_ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ValueError("a batch's custom_ids is not a list of ids")
    record = BatchRecord(**{**fields, "custom_ids": tuple(ids)})
    checks = {
        "key": isinstance(record.key, str), "attempt": isinstance(record.attempt, int),
        "status": isinstance(record.status, str),
        "resubmitted": isinstance(record.resubmitted, bool),
        "file_id": record.file_id is None or isinstance(record.file_id, str),
        "batch_id": record.batch_id is None or isinstance(record.batch_id, str),
        "uploaded_at": record.uploaded_at is None or isinstance(record.uploaded_at, int),
    }
    if wrong := [name for name, ok in checks.items() if not ok]:
        raise ValueError(f"batch {record.key!r} has a wrong {wrong[0]}")
    return record


def _fields(item: Any, known: Iterable[str]) -> dict[str, Any]:
    """A JSON object's fields, all of them ``known`` ones."""
    if not isinstance(item, dict):
        raise ValueError("an entry is not a JSON object")
    if unknown := set(item) - set(known):
        raise ValueError(f"unknown field {sorted(unknown)[0]!r}")
    return item
