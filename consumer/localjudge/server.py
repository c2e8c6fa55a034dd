"""An OpenAI-compatible chat-completions server on loopback, answering through a ``Responder``.

Stdlib only (``http.server``), one daemon thread per connection, so a slow or hanging answer
never blocks another request. It backs ``groundedness local-judge`` and the tests' fake judge.
Routes: ``POST /v1/chat/completions`` (and ``/chat/completions``), ``GET /v1/models``,
``GET /healthz``; anything else is a 404 and a body that is not a JSON object a 400, both in
OpenAI's error shape.
"""

from __future__ import annotations

import contextlib
import json
import select
import signal
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any, Protocol

POLL_S = 0.05
IDLE_CONNECTION_S = 30.0
BAD_JSON_MESSAGE = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
    "using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was "
    "sent was not valid JSON.)"
)


@dataclass(frozen=True, slots=True)
class Reply:
    """What to answer: a dict body is sent as JSON, a str raw (still as ``application/json``)."""

    status: int = 200
    body: dict[str, Any] | str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    hang: bool = False  # answer nothing until the client disconnects or the server stops


class Responder(Protocol):
    """Answers one chat-completions request body."""

    def __call__(self, request: dict[str, Any]) -> Reply: ...


def completion(
    content: str | None,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    refusal: str | None = None,
) -> dict[str, Any]:
    """A valid ``chat.completion`` body with one choice."""
    message = {"role": "assistant", "content": content, "refusal": refusal}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def error_body(
    message: str,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
) -> dict[str, Any]:
    """An error body in OpenAI's shape."""
    return {"error": {"message": message, "type": type_, "code": code, "param": param}}


def error_reply(
    status: int,
    message: str,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """An error ``Reply`` in OpenAI's shape."""
    return Reply(status=status, body=error_body(message, type_, code, param), headers=headers or {})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the OpenAI client expects
    timeout = IDLE_CONNECTION_S
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.lock:
            self.server.connections.discard(self.connection)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/healthz":
            self._send(Reply(body={"ok": True}))
        elif path in ("/v1/models", "/models"):
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "local"}
                    for m in self.server.models]
            self._send(Reply(body={"object": "list", "data": data}))
        else:
            self._send(error_reply(404, f"Unknown request URL: GET {path}.", code="unknown_url"))

    def do_POST(self) -> None:
        length = self.headers.get("Content-Length", "0")
        raw = self.rfile.read(int(length) if length.isdigit() else 0)
        path = self.path.split("?", 1)[0].rstrip("/")
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._send(error_reply(404, f"Unknown request URL: POST {path}.", code="unknown_url"))
            return
        try:
            request = json.loads(raw)
        except ValueError:
            request = None
        if not isinstance(request, dict):
            self._send(error_reply(400, BAD_JSON_MESSAGE))
            return
        try:
            reply = self.server.responder(request)
        except Exception as exc:  # a broken responder shows up as a 500, not a dropped socket
            reply = error_reply(500, f"The responder failed: {exc!r}", "server_error")
        self._send(reply)

    def _send(self, reply: Reply) -> None:
        stopping = self.server.stopping
        if reply.hang:
            while not stopping.is_set() and not self._client_gone():
                pass
            self.close_connection = True
            return
        if reply.delay_s > 0 and stopping.wait(reply.delay_s):
            self.close_connection = True
            return
        body = reply.body if reply.body is not None else ""
        payload = (json.dumps(body) if isinstance(body, dict) else body).encode()
        headers = dict(reply.headers)
        if not any(name.lower() == "content-type" for name in headers):
            headers["Content-Type"] = "application/json"
        try:
            self.send_response(reply.status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:  # the client went away first
            self.close_connection = True

    def _client_gone(self) -> bool:
        """Wait up to ``POLL_S``; True once the client has closed its end."""
        readable, _, _ = select.select([self.connection], [], [], POLL_S)
        if not readable:
            return False
        try:
            return not self.connection.recv(1, socket.MSG_PEEK)
        except OSError:
            return True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # socketserver's 5 dropped connections when 64 clients connect

    def __init__(self, address: tuple[str, int], responder: Responder, verbose: bool) -> None:
        self.responder = responder
        self.verbose = verbose
        self.models: tuple[str, ...] = ()
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.connections: set[socket.socket] = set()
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if self.verbose:
            super().handle_error(request, client_address)


class JudgeServer:
    """A chat-completions server on ``host:port`` (0 picks a free port) in a background thread."""

    def __init__(
        self,
        responder: Responder,
        host: str = "127.0.0.1",
        port: int = 0,
        models: tuple[str, ...] = ("local-judge",),
        verbose: bool = False,
    ) -> None:
        self.host = host
        self._server = _Server((host, port), responder, verbose)
        self._server.models = models
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The base URL for an OpenAI client: ``http://HOST:PORT/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> JudgeServer:
        """Serve in a background daemon thread; returns self."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(POLL_S,), name="judge-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: end delayed and hanging answers, cut open connections, free the port."""
        self._server.stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
        with self._server.lock:
            connections = list(self._server.connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def serve_forever(self) -> None:
        """Serve until SIGTERM or SIGINT, then stop cleanly (main thread only: it sets handlers)."""
        done = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            done.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            while not done.wait(0.5):
                pass
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def __enter__(self) -> JudgeServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
