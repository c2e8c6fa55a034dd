"""The health server, served for real on loopback over fixed probes."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from consumer.errors import ConfigError
from consumer.health.probes import Check
from consumer.health.server import HealthServer
from consumer.ops import metrics

pytestmark = pytest.mark.usefixtures("default_structlog")


@dataclass
class FixedProbes:
    live: Check = field(default_factory=lambda: Check(True, "ok"))
    ready: Check = field(default_factory=lambda: Check(False, "starting: connecting to Kafka"))

    def liveness(self) -> Check:
        return self.live

    def readiness(self) -> Check:
        return self.ready


@pytest.fixture
async def served() -> AsyncIterator[tuple[FixedProbes, httpx2.AsyncClient]]:
    probes = FixedProbes()
    server = HealthServer(probes)
    port = await server.start(0, host="127.0.0.1")
    async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", trust_env=False,
                                  timeout=5) as client:
        yield probes, client
    await server.close()


async def test_probes_answer_200_or_503_with_the_reason(
    served: tuple[FixedProbes, httpx2.AsyncClient],
) -> None:
    probes, client = served
    live, ready = await client.get("/healthz"), await client.get("/readyz")
    assert (live.status_code, live.text) == (200, "ok\n")
    assert (ready.status_code, ready.text) == (503, "starting: connecting to Kafka\n")

    probes.ready = Check(True, "ready")
    probes.live = Check(False, "fetch loop stuck: no fetch for 75 s")
    live, ready = await client.get("/healthz"), await client.get("/readyz?verbose=1")
    assert (live.status_code, live.text) == (503, "fetch loop stuck: no fetch for 75 s\n")
    assert ready.status_code == 200


async def test_metrics_are_the_prometheus_exposition_of_the_registry(
    served: tuple[FixedProbes, httpx2.AsyncClient],
) -> None:
    _, client = served
    metrics.IN_FLIGHT.set(7)
    metrics.expect_rules(["groundedness"])  # what wiring does for RULES
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    for name in ("groundedness_verdicts", "groundedness_skipped", "groundedness_dead_letters",
                 "groundedness_judge_latency_seconds", "groundedness_judge_tokens",
                 "groundedness_judge_retries", "groundedness_in_flight",
                 "groundedness_consumer_lag", "groundedness_circuit_open"):
        assert name in families, name
    assert families["groundedness_in_flight"].samples[0].value == 7
    verdicts = {s.labels["verdict"] for s in families["groundedness_verdicts"].samples
                if s.name == "groundedness_verdicts_total" and s.labels["rule"] == "groundedness"}
    assert verdicts == {"pass", "fail", "error"}  # present at 0 before the first verdict

    openmetrics = await client.get(
        "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    assert openmetrics.text.endswith("# EOF\n")


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/", 404, id="root"),
        pytest.param("GET", "/health", 404, id="unknown-path"),
        pytest.param("POST", "/readyz", 405, id="post"),
        pytest.param("DELETE", "/metrics", 405, id="delete"),
    ],
)
async def test_other_requests_are_refused(
    served: tuple[FixedProbes, httpx2.AsyncClient], method: str, path: str, status: int
) -> None:
    _, client = served
    assert (await client.request(method, path)).status_code == status


async def test_head_gets_headers_only(served: tuple[FixedProbes, httpx2.AsyncClient]) -> None:
    _, client = served
    response = await client.head("/healthz")
    assert response.status_code == 200
    assert response.headers["content-length"] == "3"
    assert response.content == b""


async def test_garbage_and_silent_clients_do_not_hurt_the_server(
    served: tuple[FixedProbes, httpx2.AsyncClient],
) -> None:
    _, client = served
    port = client.base_url.port
    assert port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"\x00\xff\r\n\r\n")
    await writer.drain()
    # aiohttp answers what is not HTTP with a 400, then closes: read() reaches the end
    answer = await asyncio.wait_for(reader.read(), 5)
    assert answer.startswith((b"HTTP/1.0 400 Bad Request\r\n", b"HTTP/1.1 400 Bad Request\r\n"))
    writer.close()
    await writer.wait_closed()
    _, silent = await asyncio.open_connection("127.0.0.1", port)  # connects, says nothing
    assert (await client.get("/healthz")).status_code == 200
    silent.close()
    await silent.wait_closed()


async def test_a_taken_port_is_a_configuration_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"HEALTH_PORT: port {port} is already in use"):
            await HealthServer(FixedProbes()).start(port, host="127.0.0.1")




async def test_a_half_sent_request_is_cut_off_once_idle() -> None:
    server = HealthServer(FixedProbes(), idle_timeout_s=0.3)
    port = await server.start(0, host="127.0.0.1")
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
        writer.close()
        await writer.wait_closed()
    finally:
        await server.close()


async def test_a_malformed_request_is_answered_400_and_not_logged(
    served: tuple[FixedProbes, httpx2.AsyncClient], caplog: pytest.LogCaptureFixture
) -> None:
    _, client = served
    port = client.base_url.port
    assert port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    with caplog.at_level(logging.DEBUG):
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    await writer.wait_closed()
    assert answer.startswith((b"HTTP/1.0 400 Bad Request\r\n", b"HTTP/1.1 400 Bad Request\r\n"))
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
