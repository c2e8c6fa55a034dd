"""The Batch API on the local judge: uploaded files and batches, in OpenAI's shapes, on a schedule.

A batch moves as OpenAI's do, ``seconds_per_state`` in each state:

    validating -> in_progress -> finalizing -> completed
        \\-> failed (errors.data)   \\-> expired (partial output; the rest batch_expired)
    (any running state) -> cancelling -> cancelled (partial output; the rest batch_cancelled)

A batch advances when it is looked at (retrieved, listed, cancelled), from the time elapsed
since it was created: no timers, so what a client sees depends only on the clock. In progress,
its lines are answered a share at a time as the state's time passes (``request_counts`` grow),
each through the same ``Responder`` as a chat completion; an answer that is an HTTP error
becomes an error-file line with that status and OpenAI's error body, an answer that never comes
(``hang``) a ``request_timeout`` line. The output and error files are written when the batch
ends, as ``batch_output`` files.

What happens to the next batches besides their lines' answers is scripted with ``BatchFate``
(``BatchService.fates``): expire after answering some requests, be cancelled, or fail
validation though the file is valid (the organisation's enqueued-token limit). A file that is
not valid fails validation as OpenAI's does: one ``errors.data`` entry per bad line.

The ``BatchService`` methods return ``Reply`` values; ``server.py`` routes to them.
"""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from consumer.localjudge.replies import Reply, Responder, error_reply

CHAT_ENDPOINT = "/v1/chat/completions"
COMPLETION_WINDOW = "24h"
COMPLETION_WINDOW_S = 24 * 3600
FILE_RETENTION_S = 30 * 24 * 3600
MAX_REQUESTS_PER_FILE = 50_000
MAX_FILE_BYTES = 200 * 1024 * 1024
PURPOSES = frozenset({"assistants", "batch", "fine-tune", "vision", "user_data", "evals"})
RUNNING = ("validating", "in_progress", "finalizing", "cancelling")
ENQUEUED_TOKENS_MESSAGE = (
    "Enqueued token limit reached for {model} in organization org-local. Limit: 2,000,000 "
    "enqueued tokens. Please try again once some in_progress batches have been completed."
)


@dataclass(frozen=True, slots=True)
class BatchFate:
    """What happens to one batch besides its lines' own answers (the default: it completes)."""

    expire_after: int | None = None  # answers this many requests, then expires (the rest not)
    cancel_after: int | None = None  # answers this many requests, then someone cancels it
    fail_validation: bool = False  # fails validation though its lines are valid


@dataclass(slots=True)
class StoredFile:
    """One file: an upload (``batch``) or a batch's output or errors (``batch_output``)."""

    id: str
    purpose: str
    filename: str
    data: bytes
    created_at: int

    def body(self) -> dict[str, Any]:
        """The ``file`` object."""
        return {
            "id": self.id, "object": "file", "bytes": len(self.data),
            "created_at": self.created_at, "expires_at": self.created_at + FILE_RETENTION_S,
            "filename": self.filename, "purpose": self.purpose, "status": "processed",
            "status_details": None,
        }


@dataclass(slots=True)
class _Batch:
    """One batch's state; advanced by ``BatchService`` under its lock."""

    id: str
    input_file_id: str
    metadata: dict[str, str] | None
    created: float
    fate: BatchFate
    status: str = "validating"
    at: dict[str, float] = field(default_factory=dict)  # state name -> when it was entered
    requests: list[dict[str, Any]] = field(default_factory=list)
    model: str | None = None
    errors: list[dict[str, Any]] | None = None
    outputs: list[str] = field(default_factory=list)
    error_lines: list[str] = field(default_factory=list)
    completed: int = 0
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None

    @property
    def answered(self) -> int:
        return self.completed + self.failed

    def body(self) -> dict[str, Any]:
        """The ``batch`` object."""
        def stamp(state: str) -> int | None:
            return int(self.at[state]) if state in self.at else None

        expires = self.at.get("expires", self.created + COMPLETION_WINDOW_S)
        return {
            "id": self.id, "object": "batch", "endpoint": CHAT_ENDPOINT,
            "errors": None if self.errors is None else {"object": "list", "data": self.errors},
            "input_file_id": self.input_file_id, "completion_window": COMPLETION_WINDOW,
            "status": self.status, "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id, "created_at": int(self.created),
            "in_progress_at": stamp("in_progress"), "expires_at": int(expires),
            "finalizing_at": stamp("finalizing"), "completed_at": stamp("completed"),
            "failed_at": stamp("failed"), "expired_at": stamp("expired"),
            "cancelling_at": stamp("cancelling"), "cancelled_at": stamp("cancelled"),
            "request_counts": {
                "total": len(self.requests), "completed": self.completed, "failed": self.failed,
            },
            "metadata": self.metadata, "model": self.model,
            "usage": {
                "input_tokens": self.input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": self.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": self.input_tokens + self.output_tokens,
            },
        }


class BatchService:
    """Files and batches over ``responder``. Knobs, settable while serving:
    ``seconds_per_state``, ``max_requests_per_file``, ``max_file_bytes``, ``fates`` (a queue:
    each batch created takes the next one, if any), ``failing_retrievals`` (the next so many
    ``GET /v1/batches/{id}`` answer 500, as during an incident) and ``clock`` (epoch s)."""

    def __init__(
        self,
        responder: Responder,
        *,
        seconds_per_state: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.seconds_per_state = seconds_per_state
        self.max_requests_per_file = MAX_REQUESTS_PER_FILE
        self.max_file_bytes = MAX_FILE_BYTES
        self.fates: deque[BatchFate] = deque()
        self.failing_retrievals = 0
        self._responder = responder
        self.clock = clock
        self._lock = threading.Lock()  # tests read the counts from another thread
        self._files: dict[str, StoredFile] = {}
        self._batches: dict[str, _Batch] = {}

    @property
    def created(self) -> list[str]:
        """The ids of every batch created, oldest first."""
        with self._lock:
            return list(self._batches)

    def stored(self, purpose: str | None = None) -> list[StoredFile]:
        """Every file held (of ``purpose``, if given), oldest first."""
        with self._lock:
            return [f for f in self._files.values() if purpose in (None, f.purpose)]

    # Files

    def upload(self, purpose: object, filename: str, data: bytes) -> Reply:
        """``POST /v1/files``."""
        if not isinstance(purpose, str) or purpose not in PURPOSES:
            return error_reply(400, f"Invalid value for 'purpose': {purpose!r}.", param="purpose")
        if purpose == "batch" and not filename.endswith(".jsonl"):
            return error_reply(400, "Invalid file format for Batch API. Must be .jsonl",
                               param="file")
        if len(data) > self.max_file_bytes:
            return self.too_large()
        with self._lock:
            stored = self._store(purpose, filename, data)
        return Reply(body=stored.body())

    def too_large(self) -> Reply:
        """The refusal of a file over ``max_file_bytes``."""
        return error_reply(400, (
            f"File is too large: over {self.max_file_bytes:,} bytes, the most this server "
            "takes for the Batch API."), param="file")

    def file(self, file_id: str) -> Reply:
        """``GET /v1/files/{id}``."""
        with self._lock:
            stored = self._files.get(file_id)
        return Reply(body=stored.body()) if stored else _no_file(file_id)

    def file_content(self, file_id: str) -> Reply:
        """``GET /v1/files/{id}/content``: the bytes as stored."""
        with self._lock:
            stored = self._files.get(file_id)
        if stored is None:
            return _no_file(file_id)
        headers = {"Content-Type": "application/octet-stream"}
        return Reply(body=stored.data.decode(errors="replace"), headers=headers)

    # Batches

    def create(self, body: dict[str, Any]) -> Reply:
        """``POST /v1/batches``: refused at once for a bad request, else ``validating``."""
        input_file_id = body.get("input_file_id")
        if body.get("endpoint") != CHAT_ENDPOINT:
            return error_reply(400, (
                f"Invalid value for 'endpoint': {body.get('endpoint')!r}. This server batches "
                f"{CHAT_ENDPOINT} only."), param="endpoint")
        if body.get("completion_window") != COMPLETION_WINDOW:
            return error_reply(400, (
                f"Invalid value for 'completion_window': {body.get('completion_window')!r}. "
                f"Supported values are: '{COMPLETION_WINDOW}'."), param="completion_window")
        metadata = body.get("metadata")
        with self._lock:
            stored = self._files.get(input_file_id) if isinstance(input_file_id, str) else None
            if stored is None or stored.purpose != "batch":
                return error_reply(400, (
                    f"Invalid 'input_file_id': {input_file_id!r}. No file with purpose 'batch' "
                    "has this id."), param="input_file_id")
            fate = self.fates.popleft() if self.fates else BatchFate()
            batch = _Batch(
                id=f"batch_{uuid.uuid4().hex}", input_file_id=stored.id,
                metadata=metadata if isinstance(metadata, dict) else None,
                created=self.clock(), fate=fate,
            )
            self._batches[batch.id] = batch
            return Reply(body=batch.body())

    def retrieve(self, batch_id: str) -> Reply:
        """``GET /v1/batches/{id}``."""
        with self._lock:
            if self.failing_retrievals > 0:
                self.failing_retrievals -= 1
                return Reply(status=500, body=_server_error())
            batch = self._advanced(batch_id)
            return Reply(body=batch.body()) if batch else _no_batch(batch_id)

    def cancel(self, batch_id: str) -> Reply:
        """``POST /v1/batches/{id}/cancel``: a running batch starts cancelling."""
        with self._lock:
            batch = self._advanced(batch_id)
            if batch is None:
                return _no_batch(batch_id)
            if batch.status not in RUNNING:
                return error_reply(409, f"Cannot cancel a batch with status '{batch.status}'.")
            if batch.status != "cancelling":
                self._enter(batch, "cancelling", self.clock())
            return Reply(body=batch.body())

    def list(self, limit: int = 20, after: str | None = None) -> Reply:
        """``GET /v1/batches``: newest first, ``after`` a batch id, ``limit`` per page."""
        with self._lock:
            ids = list(reversed(self._batches))
            start = ids.index(after) + 1 if after in ids else 0
            page = [self._advanced(i) for i in ids[start : start + max(1, min(limit, 100))]]
            data = [b.body() for b in page if b is not None]
            return Reply(body={
                "object": "list", "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": start + len(data) < len(ids),
            })

    # The schedule

    def _advanced(self, batch_id: str) -> _Batch | None:
        batch = self._batches.get(batch_id)
        if batch is not None:
            self._advance(batch, self.clock())
        return batch

    def _advance(self, batch: _Batch, now: float) -> None:
        """Move ``batch`` through every state whose time has come by ``now``."""
        step = self.seconds_per_state
        while True:
            status = batch.status
            since = batch.at.get(status, batch.created)
            if status == "validating" and now >= since + step:
                self._validate(batch, since + step)
            elif status == "in_progress":
                self._answer(batch, now)
                if batch.status == "in_progress":
                    if now < since + step:
                        return
                    expiring = batch.fate.expire_after is not None
                    ended = "expired" if expiring and batch.answered < len(batch.requests) \
                        else "finalizing"
                    self._enter(batch, ended, since + step)
            elif status in ("finalizing", "cancelling") and now >= since + step:
                self._enter(batch, "completed" if status == "finalizing" else "cancelled",
                            since + step)
            else:
                return

    def _validate(self, batch: _Batch, at: float) -> None:
        data = self._files[batch.input_file_id].data
        requests, errors = _read_input(data, self.max_requests_per_file)
        batch.model = next((str(r["body"].get("model")) for r in requests), None)
        if not errors and batch.fate.fail_validation:
            message = ENQUEUED_TOKENS_MESSAGE.format(model=batch.model)
            errors = [{"code": "token_limit_exceeded", "line": None, "message": message,
                       "param": None}]
        if errors:
            batch.errors = errors
            self._enter(batch, "failed", at)
            return
        batch.requests = requests
        if batch.fate.expire_after is not None:
            batch.at["expires"] = at + self.seconds_per_state  # the window ends with this state
        self._enter(batch, "in_progress", at)

    def _answer(self, batch: _Batch, now: float) -> None:
        """Answer the share of the lines due by ``now`` (all at once when a state takes no
        time), up to where the batch's fate stops it."""
        total, step = len(batch.requests), self.seconds_per_state
        elapsed = now - batch.at["in_progress"]
        due = total if step <= 0 else min(total, math.floor(total * elapsed / step))
        fate = batch.fate
        stop = min(n for n in (fate.expire_after, fate.cancel_after, total) if n is not None)
        while batch.answered < min(due, stop):
            self._answer_one(batch, batch.requests[batch.answered])
        if fate.cancel_after is not None and batch.answered >= fate.cancel_after \
                and batch.answered < total:
            self._enter(batch, "cancelling", now)

    def _answer_one(self, batch: _Batch, request: dict[str, Any]) -> None:
        line: dict[str, Any] = {"id": f"batch_req_{uuid.uuid4().hex}",
                                "custom_id": request["custom_id"], "response": None,
                                "error": None}
        try:
            reply = self._responder(request["body"])
        except Exception as exc:  # a broken responder is a 500 line, as on the chat route
            reply = error_reply(500, f"The responder failed: {exc!r}", "server_error")
        if reply.hang:
            line["error"] = {"code": "request_timeout",
                             "message": "The request to the model timed out."}
        else:
            body = reply.body if isinstance(reply.body, dict) else _server_error()
            status = reply.status if isinstance(reply.body, dict) else 500
            line["response"] = {"status_code": status, "request_id": uuid.uuid4().hex,
                                "body": body}
        if line["response"] is not None and line["response"]["status_code"] == 200:
            batch.completed += 1
            usage = line["response"]["body"].get("usage") or {}
            batch.input_tokens += int(usage.get("prompt_tokens") or 0)
            batch.output_tokens += int(usage.get("completion_tokens") or 0)
            batch.outputs.append(json.dumps(line))
        else:
            batch.failed += 1
            batch.error_lines.append(json.dumps(line))

    def _enter(self, batch: _Batch, status: str, at: float) -> None:
        batch.status = status
        batch.at[status] = at
        if status in ("completed", "expired", "cancelled"):
            self._write_results(batch)

    def _write_results(self, batch: _Batch) -> None:
        """The output and error files (none when empty); the requests never answered are
        error lines with the reason the batch stopped (expired, cancelled)."""
        code = {"expired": "batch_expired", "cancelled": "batch_cancelled"}.get(batch.status)
        if code is not None:
            message = ("This request could not be executed before the completion window "
                       "expired." if code == "batch_expired"
                       else "The batch was cancelled before this request was executed.")
            for request in batch.requests[batch.answered :]:
                batch.error_lines.append(json.dumps({
                    "id": f"batch_req_{uuid.uuid4().hex}", "custom_id": request["custom_id"],
                    "response": None, "error": {"code": code, "message": message},
                }))
        if batch.outputs:
            name = f"{batch.id}_output.jsonl"
            batch.output_file_id = self._store("batch_output", name, _jsonl(batch.outputs)).id
        if batch.error_lines:
            name = f"{batch.id}_error.jsonl"
            batch.error_file_id = self._store("batch_output", name, _jsonl(batch.error_lines)).id

    def _store(self, purpose: str, filename: str, data: bytes) -> StoredFile:
        stored = StoredFile(f"file-{uuid.uuid4().hex[:24]}", purpose, filename, data,
                            int(self.clock()))
        self._files[stored.id] = stored
        return stored


def _read_input(
    data: bytes, max_requests: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A batch input file's requests, or its errors as OpenAI reports them (one per bad line)."""
    errors: list[dict[str, Any]] = []
    requests: list[dict[str, Any]] = []
    seen: set[str] = set()
    model: str | None = None
    for number, text in _lines(data):
        try:
            request = json.loads(text)
        except ValueError:
            request = None
        problem = _problem(request, seen, model)
        if problem is not None:
            code, message, param = problem
            errors.append({"code": code, "line": number, "message": message, "param": param})
            continue
        request = cast(dict[str, Any], request)  # _problem refused anything else
        seen.add(request["custom_id"])
        model = model or str(request["body"].get("model"))
        requests.append(request)
    if not errors and not requests:
        errors.append({"code": "empty_file", "line": None,
                       "message": "The batch input file is empty.", "param": None})
    if len(requests) > max_requests:
        errors.append({"code": "too_many_tasks", "line": None, "param": None, "message": (
            f"The batch input file has {len(requests):,} requests; a batch may have at most "
            f"{max_requests:,}.")})
    return requests, errors


def _problem(
    request: object, seen: set[str], model: str | None
) -> tuple[str, str, str | None] | None:
    """Why one input line is refused (code, message, param), or None."""
    if not isinstance(request, dict):
        return "invalid_json_line", "This line is not parseable as valid JSON.", None
    for name, kind in (("custom_id", str), ("method", str), ("url", str), ("body", dict)):
        if not isinstance(request.get(name), kind):
            return "missing_required_parameter", f"Missing required parameter: '{name}'.", name
    if request["method"] != "POST":
        return "invalid_method", "Only the POST method is supported.", "method"
    if request["url"] != CHAT_ENDPOINT:
        return "mismatched_endpoint", (
            f"The URL provided for this request does not match the batch endpoint "
            f"{CHAT_ENDPOINT}."), "url"
    if request["custom_id"] in seen:
        return "duplicate_custom_id", (
            f"The custom_id for this request is a duplicate of another request: "
            f"{request['custom_id']!r}."), "custom_id"
    if model is not None and request["body"].get("model") != model:
        return "mismatched_model", (
            "The provided model does not match the model of the other requests in the "
            "batch."), "body.model"
    return None


def _lines(data: bytes) -> Iterator[tuple[int, str]]:
    """(1-based number, line) for each line; the newline ending the file makes no line."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    yield from enumerate((line.removesuffix("\r") for line in lines), 1)


def _jsonl(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


def _server_error() -> dict[str, Any]:
    return {"error": {"message": "The server had an error while processing your request.",
                      "type": "server_error", "param": None, "code": None}}


def _no_file(file_id: str) -> Reply:
    return error_reply(404, f"No such File object: {file_id}", param="id")


def _no_batch(batch_id: str) -> Reply:
    return error_reply(404, f"No batch found with id '{batch_id}'.", param="batch_id")
