"""A lean chat-completions judge for benchmarks: one asyncio process, a fixed latency.

An ``aiohttp.web`` app on the process's own event loop, so the worker and the baselines are
measured through the real openai client they ship with. A request whose body holds
``[[hang]]`` gets no answer until the client gives up (at most ``MAX_HANG_S``). Every
chat-completions arrival is recorded with ``time.monotonic()`` (one clock for every process
on Linux), readable at ``GET /stats`` and ``GET /stats/arrivals``.

``--server threading`` serves the same answers through the project's ``JudgeServer`` instead
(the tests' fake judge: a ``Responder`` behind aiohttp on a thread of its own), so the harness
can compare the two as fake judges.

    python -m benchmarks.judge --latency 0.5 [--jitter 0.2] [--port 0] [--server asyncio|threading]

prints ``port N`` on its first line, then serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from consumer.localjudge.replies import Reply, completion
from consumer.localjudge.server import JudgeServer

HANG_MARKER = b"[[hang]]"
MAX_HANG_S = 120.0
MODEL = "bench-judge"
CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")


class Answers:
    """What the judge answers and what it recorded; shared by both servers."""

    def __init__(self, latency_s: float, jitter: float = 0.0) -> None:
        self.latency_s = latency_s
        self.jitter = jitter  # each answer takes latency_s * (1 +- jitter), uniformly
        self._random = random.Random(11)
        self.arrivals: list[float] = []
        self.hangs = 0

    def arrive(self, body: bytes) -> bool:
        """Record one chat-completions request; True when it must hang."""
        self.arrivals.append(time.monotonic())
        if HANG_MARKER in body:
            self.hangs += 1
            return True
        return False

    def delay_s(self) -> float:
        """How long this answer takes: the fixed latency, or around it with ``jitter``."""
        if not self.jitter:
            return self.latency_s
        return self.latency_s * (1 + self.jitter * self._random.uniform(-1, 1))

    def answer(self, body: bytes) -> bytes:
        """A valid completion whose score (1-5) is a deterministic function of the body."""
        score = zlib.crc32(body) % 5 + 1
        content = json.dumps({
            "score": score,
            "reason": f"benchmark verdict {score}",
            "unsupported_claims": [] if score >= 4 else ["a claim"],
        })
        return json.dumps(completion(content, MODEL, len(body) // 4, len(content) // 4)).encode()

    def stats(self, with_arrivals: bool) -> bytes:
        """Counts (and every arrival time) as JSON."""
        stats: dict[str, Any] = {
            "count": len(self.arrivals),
            "hangs": self.hangs,
            "first_at": self.arrivals[0] if self.arrivals else None,
            "last_at": self.arrivals[-1] if self.arrivals else None,
        }
        if with_arrivals:
            stats["arrivals"] = self.arrivals
        return json.dumps(stats).encode()


# -- the asyncio server ------------------------------------------------------------------------


def bench_handler(answers: Answers) -> Callable[[web.BaseRequest], Awaitable[web.Response]]:
    """The benchmark judge's routes over ``answers``: one function on aiohttp's low-level
    server (no router, no middleware: the least CPU per call)."""
    listed = json.dumps({"object": "list", "data": [
        {"id": MODEL, "object": "model", "created": 0, "owned_by": "bench"}]}).encode()

    async def handle(request: web.BaseRequest) -> web.Response:
        path = request.path.rstrip("/")
        if request.method == "POST" and path in CHAT_PATHS:
            body = await request.read()
            if answers.arrive(body):
                # Answer nothing: the client times out and hangs up, which cancels this wait.
                await asyncio.sleep(MAX_HANG_S)
                return _json(504, b'{"error": {"message": "hung for the longest hang"}}')
            if answers.latency_s > 0:
                await asyncio.sleep(answers.delay_s())
            return _json(200, answers.answer(body))
        if request.method == "GET" and path.startswith("/stats"):
            return _json(200, answers.stats(path.endswith("arrivals")))
        if request.method == "GET" and path in ("/v1/models", "/models"):
            return _json(200, listed)
        if request.method == "GET" and path == "/healthz":
            return _json(200, b'{"ok": true}')
        return _json(404, b'{"error": {"message": "not found"}}')

    return handle


def _json(status: int, payload: bytes) -> web.Response:
    return web.Response(status=status, body=payload, content_type="application/json")


async def start_asyncio(answers: Answers, host: str, port: int) -> web.ServerRunner:
    """Serve ``answers`` on ``host:port`` (0: any free port); the runner, whose ``addresses``
    give the port and whose ``cleanup()`` hangs up on every open connection."""
    server = web.Server(bench_handler(answers), access_log=None, handler_cancellation=True)
    runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    await web.TCPSite(runner, host, port, backlog=1024).start()
    return runner


async def serve_asyncio(answers: Answers, host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT, then hang up on every open connection."""
    runner = await start_asyncio(answers, host, port)
    print(f"port {runner.addresses[0][1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


# -- the same answers through the project's JudgeServer ---------------------------------------


def serve_threading(answers: Answers, host: str, port: int) -> None:
    """Serve with ``JudgeServer`` (a responder, aiohttp in a thread) until SIGTERM or SIGINT."""

    def respond(request: dict[str, Any]) -> Reply:
        body = json.dumps(request).encode()
        if answers.arrive(body):
            return Reply(hang=True)
        return Reply(body=json.loads(answers.answer(body)), delay_s=answers.delay_s())

    server = JudgeServer(respond, host=host, port=port, models=(MODEL,))
    print(f"port {server.port}", flush=True)
    server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and serve."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.judge")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per answer")
    parser.add_argument("--jitter", type=float, default=0.0,
                        help="spread latencies uniformly over latency * (1 +- jitter)")
    parser.add_argument("--server", choices=("asyncio", "threading"), default="asyncio")
    args = parser.parse_args(argv)
    answers = Answers(args.latency, args.jitter)
    if args.server == "threading":
        serve_threading(answers, args.host, args.port)
    else:
        asyncio.run(serve_asyncio(answers, args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
