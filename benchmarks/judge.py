"""A lean chat-completions judge for benchmarks: one asyncio process, a fixed latency.

It speaks just enough HTTP/1.1 (keep-alive, ``Content-Length`` bodies) for the real openai
client, so the worker and the baselines are measured through the SDK they ship with. A
request whose body holds ``[[hang]]`` gets no answer until the client gives up. Every
chat-completions arrival is recorded with ``time.monotonic()`` (one clock for every process
on Linux), readable at ``GET /stats`` and ``GET /stats/arrivals``.

``--server threading`` serves the same answers through the project's stdlib
``JudgeServer`` instead, so the harness can compare the two as fake judges.

    python -m benchmarks.judge --latency 0.5 [--jitter 0.2] [--port 0] [--server asyncio|threading]

prints ``port N`` on its first line, then serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import sys
import time
import zlib
from typing import Any

from consumer.localjudge.server import JudgeServer, Reply, completion

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


def _response(status: int, payload: bytes, close: bool = False) -> bytes:
    reason = {200: "OK", 404: "Not Found", 400: "Bad Request"}.get(status, "Error")
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n"
        f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n"
    )
    return head.encode("latin-1") + payload


async def _serve_connection(
    answers: Answers, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            length, close = 0, False
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value)
                elif name == "connection":
                    close = value.strip().lower() == "close"
            body = await reader.readexactly(length) if length else b""
            path = target.split("?", 1)[0].rstrip("/")
            if method == "POST" and path in CHAT_PATHS:
                if answers.arrive(body):
                    # Answer nothing: wait for the client to time out and hang up.
                    with contextlib.suppress(TimeoutError, ConnectionError):
                        await asyncio.wait_for(reader.read(), MAX_HANG_S)
                    return
                if answers.latency_s > 0:
                    await asyncio.sleep(answers.delay_s())
                writer.write(_response(200, answers.answer(body), close))
            elif method == "GET" and path.startswith("/stats"):
                writer.write(_response(200, answers.stats(path.endswith("arrivals")), close))
            elif method == "GET" and path in ("/v1/models", "/models"):
                models = [{"id": MODEL, "object": "model", "created": 0, "owned_by": "bench"}]
                writer.write(_response(200, json.dumps({"object": "list", "data": models})
                                       .encode(), close))
            elif method == "GET" and path == "/healthz":
                writer.write(_response(200, b'{"ok": true}', close))
            else:
                writer.write(_response(404, b'{"error": {"message": "not found"}}', close))
            await writer.drain()
            if close:
                return
    except ConnectionError:
        return
    finally:
        writer.close()


async def serve_asyncio(answers: Answers, host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT, then hang up on every open connection."""
    open_connections: dict[asyncio.Task[Any], asyncio.StreamWriter] = {}

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        open_connections[task] = writer
        try:
            await _serve_connection(answers, reader, writer)
        finally:
            open_connections.pop(task, None)

    server = await asyncio.start_server(connection, host, port, backlog=1024)
    bound = server.sockets[0].getsockname()[1]
    print(f"port {bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
        server.close()
        for writer in open_connections.values():
            writer.close()  # their readers see EOF and the tasks end by themselves
        if open_connections:
            await asyncio.wait(list(open_connections), timeout=2.0)


# -- the same answers through the project's stdlib server --------------------------------------


def serve_threading(answers: Answers, host: str, port: int) -> None:
    """Serve with ``JudgeServer`` (ThreadingHTTPServer) until SIGTERM or SIGINT."""

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
