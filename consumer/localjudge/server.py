"""An OpenAI-compatible chat-completions server on loopback, answering through a ``Responder``.

Served with ``aiohttp.web`` on an event loop of its own in a daemon thread, so callers (the
``groundedness local-judge`` command, the tests' fake judge) drive it synchronously. A
responder answers at once and says how long to wait (``delay_s``) or to answer nothing
(``hang``); the wait is the server's, so a slow or hanging answer never blocks another
request. A client that hangs up ends its request's handler. Routes: ``POST
/v1/chat/completions`` (and ``/chat/completions``), ``GET /v1/models``, ``GET /healthz``;
anything else is a 404 and a body that is not a JSON object a 400, both in OpenAI's error
shape.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType

from aiohttp import web

from consumer.localjudge.replies import Reply, Responder, error_reply

IDLE_CONNECTION_S = 30.0
BACKLOG = 128  # 64 clients connecting at once must not overflow the listen queue
MAX_REQUEST_BYTES = 64 * 1024 * 1024  # aiohttp's default (1 MiB) is below a big prompt
SHUTDOWN_S = 0.1  # how long stop() lets a request finish before cutting its connection
CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
MODEL_PATHS = ("/v1/models", "/models")
BAD_JSON_MESSAGE = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
    "using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was "
    "sent was not valid JSON.)"
)


def judge_app(responder: Responder, models: tuple[str, ...]) -> web.Application:
    """The chat-completions API over ``responder``, listing ``models``."""
    listed = {"object": "list", "data": [
        {"id": m, "object": "model", "created": 0, "owned_by": "local"} for m in models]}

    async def dispatch(request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/")
        if request.method == "POST" and path in CHAT_PATHS:
            return await _chat(responder, request)
        if request.method == "GET" and path == "/healthz":
            return _response(Reply(body={"ok": True}))
        if request.method == "GET" and path in MODEL_PATHS:
            return _response(Reply(body=listed))
        message = f"Unknown request URL: {request.method} {path}."
        return _response(error_reply(404, message, code="unknown_url"))

    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    app.router.add_route("*", "/{path:.*}", dispatch)
    return app


async def _chat(responder: Responder, request: web.Request) -> web.StreamResponse:
    try:
        body = json.loads(await request.read())
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return _response(error_reply(400, BAD_JSON_MESSAGE))
    try:
        reply = responder(body)
    except Exception as exc:  # a broken responder shows up as a 500, not a dropped socket
        reply = error_reply(500, f"The responder failed: {exc!r}", "server_error")
    if reply.hang:
        # Answer nothing: the client's hang-up, or stop(), cancels this wait.
        await asyncio.get_running_loop().create_future()
    if reply.delay_s > 0:
        await asyncio.sleep(reply.delay_s)
    return _response(reply)


def _response(reply: Reply) -> web.Response:
    body = reply.body if reply.body is not None else ""
    payload = (json.dumps(body) if isinstance(body, dict) else body).encode()
    headers = dict(reply.headers)
    if not any(name.lower() == "content-type" for name in headers):
        headers["Content-Type"] = "application/json"
    return web.Response(status=reply.status, body=payload, headers=headers)


class JudgeServer:
    """A chat-completions server on ``host:port`` (0 picks a free port) in a background thread.

    The port is bound when the object is made (``port`` and ``url`` are known at once);
    ``start()`` serves, ``stop()`` ends delayed and hanging answers, cuts open connections
    and frees the port.
    """

    def __init__(
        self,
        responder: Responder,
        host: str = "127.0.0.1",
        port: int = 0,
        models: tuple[str, ...] = ("local-judge",),
        verbose: bool = False,
    ) -> None:
        self.host = host
        self._app = judge_app(responder, models)
        self._verbose = verbose
        self._socket = socket.create_server((host, port), backlog=BACKLOG)
        self._port = int(self._socket.getsockname()[1])
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop_serving: Callable[[], object] = lambda: None  # set by the serving thread
        self._failure: BaseException | None = None

    @property
    def port(self) -> int:
        """The bound port."""
        return self._port

    @property
    def url(self) -> str:
        """The base URL for an OpenAI client: ``http://HOST:PORT/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> JudgeServer:
        """Serve in a background daemon thread; returns self once it accepts requests."""
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._serve(),), name="judge-server", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            self.stop()
            raise RuntimeError(f"the judge server did not start: {self._failure!r}")
        return self

    async def _serve(self) -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._stop_serving = lambda: loop.call_soon_threadsafe(stopping.set)
        runner = web.AppRunner(
            self._app,
            handle_signals=False,
            handler_cancellation=True,  # a client that hangs up ends its handler
            keepalive_timeout=IDLE_CONNECTION_S,
            shutdown_timeout=SHUTDOWN_S,
            access_log=logging.getLogger("aiohttp.access") if self._verbose else None,
        )
        try:
            await runner.setup()
            await web.SockSite(runner, self._socket).start()
        except Exception as exc:
            self._failure = exc
        self._ready.set()
        try:
            if self._failure is None:
                await stopping.wait()
        finally:
            # Cuts requests still waiting (delay, hang) after SHUTDOWN_S: no answer.
            await runner.cleanup()

    def stop(self) -> None:
        """Stop serving: end delayed and hanging answers, cut open connections, free the port."""
        if self._thread is not None:
            self._stop_serving()
            self._thread.join()
            self._thread = None
        self._socket.close()

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

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
