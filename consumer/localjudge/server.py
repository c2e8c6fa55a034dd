"""An OpenAI-compatible chat-completions server on loopback, answering through a ``Responder``.

Served with ``aiohttp.web`` on an event loop of its own in a daemon thread, so callers (the
``groundedness local-judge`` command, the tests' fake judge) drive it synchronously. A
responder answers at once and says how long to wait (``delay_s``) or to answer nothing
(``hang``); the wait is the server's, so a slow or hanging answer never blocks another
request. A client that hangs up ends its request's handler. Routes: ``POST
/v1/chat/completions`` (and ``/chat/completions``), ``GET /v1/models``, ``GET /healthz``, and
the Batch API over the same responder (``batches.py``): ``POST /v1/files`` (multipart),
``GET /v1/files/{id}``, ``GET /v1/files/{id}/content``, ``POST /v1/batches``, ``GET
/v1/batches``, ``GET /v1/batches/{id}``, ``POST /v1/batches/{id}/cancel`` (each also without
``/v1``); anything else is a 404 and a body that is not a JSON object a 400, both in OpenAI's
error shape.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import socket
import threading
from collections.abc import Awaitable, Callable
from email.message import Message
from email.parser import BytesHeaderParser
from types import FrameType
from typing import Any

from aiohttp import web

from consumer.localjudge.batches import BatchService
from consumer.localjudge.replies import Reply, Responder, error_reply

IDLE_CONNECTION_S = 30.0
BACKLOG = 128  # 64 clients connecting at once must not overflow the listen queue
MAX_REQUEST_BYTES = 64 * 1024 * 1024  # aiohttp's default (1 MiB) is below a big prompt
FORM_OVERHEAD_BYTES = 64 * 1024  # an upload's form around its file: boundaries, headers, purpose
SHUTDOWN_S = 0.1  # how long stop() lets a request finish before cutting its connection
BAD_JSON_MESSAGE = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
    "using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was "
    "sent was not valid JSON.)"
)


def judge_app(
    responder: Responder, models: tuple[str, ...], batches: BatchService | None = None,
    owned_by: str = "local",
) -> web.Application:
    """The chat-completions API over ``responder``, listing ``models`` (each ``owned_by``),
    and the Batch API (``batches``, over the same responder unless given)."""
    listed = {"object": "list", "data": [
        {"id": m, "object": "model", "created": 0, "owned_by": owned_by} for m in models]}
    service = batches or BatchService(responder)

    async def chat(request: web.Request) -> web.StreamResponse:
        return await _chat(responder, request)

    async def healthz(_: web.Request) -> web.StreamResponse:
        return _response(Reply(body={"ok": True}))

    async def list_models(_: web.Request) -> web.StreamResponse:
        return _response(Reply(body=listed))

    async def upload(request: web.Request) -> web.StreamResponse:
        return _response(await _upload(service, request))

    async def file(request: web.Request) -> web.StreamResponse:
        return _response(service.file(request.match_info["file_id"]))

    async def file_content(request: web.Request) -> web.StreamResponse:
        return _response(service.file_content(request.match_info["file_id"]))

    async def create_batch(request: web.Request) -> web.StreamResponse:
        body = await _json_body(request)
        return _response(service.create(body) if body is not None else _bad_json())

    async def list_batches(request: web.Request) -> web.StreamResponse:
        limit, after = request.query.get("limit", "20"), request.query.get("after")
        return _response(service.list(int(limit) if limit.isdigit() else 20, after))

    async def batch(request: web.Request) -> web.StreamResponse:
        return _response(service.retrieve(request.match_info["batch_id"]))

    async def cancel_batch(request: web.Request) -> web.StreamResponse:
        return _response(service.cancel(request.match_info["batch_id"]))

    routes = [("POST", "/chat/completions", chat), ("GET", "/models", list_models),
              ("POST", "/files", upload), ("GET", "/files/{file_id}", file),
              ("GET", "/files/{file_id}/content", file_content),
              ("POST", "/batches", create_batch), ("GET", "/batches", list_batches),
              ("GET", "/batches/{batch_id}", batch),
              ("POST", "/batches/{batch_id}/cancel", cancel_batch)]
    app = web.Application(client_max_size=MAX_REQUEST_BYTES, middlewares=[_openai_not_found])
    # Trailing slashes are the path without them: every spelling a client's base URL makes.
    slashes = "{trailing_slashes:/*}"
    app.router.add_route("GET", f"/healthz{slashes}", healthz)
    for method, path, handler in routes:
        # OpenAI's paths, and the same without /v1 (a base URL without it).
        for spelling in (f"/v1{path}{slashes}", f"{path}{slashes}"):
            app.router.add_route(method, spelling, handler)
    return app


@web.middleware
async def _openai_not_found(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> web.StreamResponse:
    """A path without a route, or without one for its method (OpenAI answers 404 there too,
    not 405), in OpenAI's error shape."""
    try:
        return await handler(request)
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed):
        message = f"Unknown request URL: {request.method} {request.path.rstrip('/')}."
        return _response(error_reply(404, message, code="unknown_url"))


async def _chat(responder: Responder, request: web.Request) -> web.StreamResponse:
    body = await _json_body(request)
    if body is None:
        return _response(_bad_json())
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


async def _json_body(request: web.Request) -> dict[str, Any] | None:
    """The request's body if it is a JSON object, else None."""
    try:
        body = json.loads(await request.read())
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _bad_json() -> Reply:
    return error_reply(400, BAD_JSON_MESSAGE)


async def _upload(service: BatchService, request: web.Request) -> Reply:
    """``POST /v1/files``: the multipart form's ``file`` and ``purpose``.

    The body is read here, not with ``request.post()``: a batch file may be up to 200 MB,
    above the app's body limit; and aiohttp's multipart reader warns (a DeprecationWarning of
    its own, an error under the tests' warning filter) depending on how the bytes arrive. It
    is kept up to ``service.max_file_bytes`` plus room for the form, and drained past that.
    """
    boundary = _boundary(request.headers.get("Content-Type", ""))
    if boundary is None:
        return error_reply(400, "Files must be uploaded as multipart/form-data.")
    cap = service.max_file_bytes + FORM_OVERHEAD_BYTES
    body = bytearray()
    async for chunk in request.content.iter_chunked(1 << 20):
        if len(body) <= cap:
            body += chunk
    if len(body) > cap:
        return service.too_large()
    fields = _form_fields(bytes(body), boundary)
    if "file" not in fields:
        return error_reply(400, "Missing required parameter: 'file'.", param="file")
    purpose = fields["purpose"][1].decode(errors="replace") if "purpose" in fields else None
    filename, data = fields["file"]
    return service.upload(purpose, filename or "", data)


def _boundary(content_type: str) -> bytes | None:
    """The multipart boundary of a ``multipart/form-data`` content type, if it is one."""
    header = Message()
    header["Content-Type"] = content_type
    boundary = header.get_boundary()
    if header.get_content_type() != "multipart/form-data" or not boundary:
        return None
    return boundary.encode()


def _form_fields(body: bytes, boundary: bytes) -> dict[str, tuple[str | None, bytes]]:
    """A multipart form's fields: name -> (filename, bytes)."""
    fields: dict[str, tuple[str | None, bytes]] = {}
    # Every delimiter but the first follows a CRLF; with one put in front, all do.
    for section in (b"\r\n" + body).split(b"\r\n--" + boundary)[1:]:
        if section.startswith(b"--"):
            break  # the closing delimiter
        head, _, data = section.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        headers = BytesHeaderParser().parsebytes(head)
        name = headers.get_param("name", header="content-disposition")
        if isinstance(name, str):
            fields[name] = (headers.get_filename(), data)
    return fields


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
        owned_by: str = "local",
    ) -> None:
        self.host = host
        self.batches = BatchService(responder)  # its knobs: seconds_per_state, fates, limits
        self._app = judge_app(responder, models, self.batches, owned_by)
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
