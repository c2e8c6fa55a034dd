"""``JudgeServer`` itself: its synchronous life cycle and what it sends for a ``Reply``."""

from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from consumer.localjudge.replies import Reply
from consumer.localjudge.server import JudgeServer, judge_app


def request(port: int, method: str, path: str, body: bytes | None = None,
            timeout_s: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        connection.request(method, path, body=body)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def chat(port: int, path: str = "/v1/chat/completions") -> tuple[int, dict[str, str], bytes]:
    return request(port, "POST", path, json.dumps({"model": "m", "messages": []}).encode())


def broken(request: dict[str, Any]) -> Reply:
    raise RuntimeError("bug in the responder")


def test_the_port_is_bound_before_start_and_freed_by_stop() -> None:
    server = JudgeServer(lambda request: Reply(body={"n": 1}))
    with socket.socket() as other, pytest.raises(OSError):  # noqa: PT011 (EADDRINUSE)
        other.bind(("127.0.0.1", server.port))
    assert server.url == f"http://127.0.0.1:{server.port}/v1"
    with server:
        assert chat(server.port)[0] == 200
    with socket.socket() as other:
        other.bind(("127.0.0.1", server.port))


def test_a_reply_is_sent_as_given() -> None:
    reply = Reply(status=429, body="raw text", headers={"Retry-After": "3", "X-Trace": "t"})
    with JudgeServer(lambda request: reply) as server:
        status, headers, body = chat(server.port, "/chat/completions/")  # a trailing slash too
    assert (status, body) == (429, b"raw text")
    assert (headers["Retry-After"], headers["X-Trace"]) == ("3", "t")
    assert headers["Content-Type"] == "application/json"


def test_a_broken_responder_is_a_500_in_openai_shape() -> None:
    with JudgeServer(broken) as server:
        status, _, body = chat(server.port)
    assert status == 500
    error = json.loads(body)["error"]
    assert error["type"] == "server_error"
    assert "bug in the responder" in error["message"]


def test_models_are_listed_and_other_methods_are_unknown_urls() -> None:
    with JudgeServer(broken, models=("a", "b")) as server:
        status, _, body = request(server.port, "GET", "/v1/models")
        missing, _, error = request(server.port, "DELETE", "/v1/models")
    assert status == 200
    assert [m["id"] for m in json.loads(body)["data"]] == ["a", "b"]
    assert missing == 404
    assert json.loads(error)["error"]["code"] == "unknown_url"


def test_a_delayed_answer_waits_then_stop_cuts_one_still_waiting() -> None:
    with JudgeServer(lambda request: Reply(body={"ok": True}, delay_s=0.2)) as server:
        started = time.monotonic()
        assert chat(server.port)[0] == 200
        assert time.monotonic() - started >= 0.2
    slow = JudgeServer(lambda request: Reply(body={"ok": True}, delay_s=30)).start()
    connection = http.client.HTTPConnection("127.0.0.1", slow.port, timeout=5)
    connection.request("POST", "/v1/chat/completions", body=b'{"messages": []}')
    time.sleep(0.1)
    started = time.monotonic()
    slow.stop()
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        connection.getresponse()
    connection.close()
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/healthz", 200), ("GET", "/healthz/", 200), ("GET", "/v1/models//", 200),
    ("GET", "/models", 200), ("POST", "/v1/models", 404), ("HEAD", "/healthz", 404),
    ("GET", "/v1/files/f-1/content/", 404), ("POST", "/batches/b-1/cancel", 404),
    ("GET", "/", 404), ("GET", "/v2/models", 404),
])
async def test_every_spelling_of_a_route_and_every_unknown_one(method: str, path: str,
                                                               status: int) -> None:
    """Trailing slashes are the path without them; a path or method without a route is
    OpenAI's 404 (not aiohttp's 405), and a known route's own 404 keeps its message."""
    app = judge_app(lambda body: Reply(body={}), ("local-judge",))
    async with TestClient(TestServer(app)) as client:
        response = await client.request(method, path)
        body = await response.text()
    assert response.status == status
    if status == 404 and method != "HEAD":
        error = json.loads(body)["error"]
        unknown = path.rstrip("/").startswith(("/v2", "/v1/models")) or path == "/"
        assert (error.get("code") == "unknown_url") == unknown, error
