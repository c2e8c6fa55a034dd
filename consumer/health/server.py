"""The health endpoints on ``HEALTH_PORT``, served with ``aiohttp.web``.

``/healthz`` and ``/readyz`` answer 200 or 503 with the probe's one-line reason; ``/metrics``
is prometheus_client's exposition of ``consumer.ops.metrics.REGISTRY``, in the format the
``Accept`` header asks for (OpenMetrics or the classic text format). GET and HEAD (headers
only) are served; any other method is a 405 and any other path a 404, in plain text.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from typing import Protocol

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from consumer.errors import ConfigError
from consumer.health.probes import Check
from consumer.ops import metrics

ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - the kubelet probes the pod's IP
PATHS = ("/healthz", "/readyz", "/metrics")
_READ_METHODS = ("GET", "HEAD")
_SHUTDOWN_S = 1.0  # every answer is immediate: nothing in flight is worth waiting for longer
# A connection that has not sent a whole request for this long is closed (the kubelet and
# Prometheus send theirs at once): half-sent requests must not hold file descriptors for ever.
IDLE_TIMEOUT_S = 5.0


class _QuietBadRequests(logging.Filter):
    """A request that is not valid HTTP gets its 400; it is the client's fault, not a line
    in the worker's log (aiohttp would log it at ERROR with a traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], HttpProcessingError))


_HTTP_LOG = logging.getLogger(__name__)
_HTTP_LOG.addFilter(_QuietBadRequests())


class Probes(Protocol):
    """What the server asks."""

    def liveness(self) -> Check: ...

    def readiness(self) -> Check: ...


class HealthServer:
    """Serves ``/healthz``, ``/readyz`` and ``/metrics``."""

    def __init__(
        self,
        probes: Probes,
        registry: CollectorRegistry = metrics.REGISTRY,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ) -> None:
        self._probes = probes
        self._registry = registry
        self._idle_timeout_s = idle_timeout_s
        self._runner: web.AppRunner | None = None

    async def start(self, port: int, host: str = ALL_INTERFACES) -> int:
        """Listen (``port`` 0: any free port) and return the port; ConfigError if taken."""
        app = web.Application()
        app.router.add_route("*", "/healthz", self._healthz)
        app.router.add_route("*", "/readyz", self._readyz)
        app.router.add_route("*", "/metrics", self._metrics)
        app.router.add_route("*", "/{path:.*}", _not_found)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=_SHUTDOWN_S,
                               keepalive_timeout=self._idle_timeout_s, logger=_HTTP_LOG)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            await runner.cleanup()
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(f"HEALTH_PORT: port {port} is already in use") from None
            raise ConfigError(f"HEALTH_PORT: cannot listen on {host}:{port}: {exc}") from None
        self._runner = runner
        return int(runner.addresses[0][1])

    async def close(self) -> None:
        """Stop listening (idempotent)."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def _healthz(self, request: web.Request) -> web.Response:
        return _probe(request, self._probes.liveness)

    async def _readyz(self, request: web.Request) -> web.Response:
        return _probe(request, self._probes.readiness)

    async def _metrics(self, request: web.Request) -> web.Response:
        if request.method not in _READ_METHODS:
            return _text(405, "method not allowed")
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(self._registry), headers={"Content-Type": content_type})


def _probe(request: web.Request, probe: Callable[[], Check]) -> web.Response:
    if request.method not in _READ_METHODS:
        return _text(405, "method not allowed")
    check = probe()
    return _text(200 if check.ok else 503, check.detail)


async def _not_found(request: web.Request) -> web.Response:
    return _text(404, "not found")


def _text(status: int, line: str) -> web.Response:
    return web.Response(status=status, text=f"{line}\n", content_type="text/plain",
                        charset="utf-8")
