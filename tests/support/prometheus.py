"""A real Prometheus server scraping one ``/metrics`` target, and a small client of its HTTP API.

``running_prometheus`` starts the binary ``make prometheus`` builds (``.cache/bin``, else
``PATH``) on a free loopback port, with a generated configuration scraping the target every
second and its storage in a temporary directory, waits until it is ready and has scraped the
target once, and stops it on exit. The target gets the ``job`` and ``namespace`` labels given,
as a ServiceMonitor gives them, so queries scoped to a release select it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx2
import yaml

from tests.support.helm import find_tool
from tests.support.ports import free_port

SCRAPE_INTERVAL_S = 1


@dataclass(frozen=True)
class Series:
    """One element of an instant vector: its labels and value (``NaN`` as Prometheus sends it)."""

    labels: dict[str, str]
    value: float


def scrape_config(target: str, job: str, namespace: str) -> dict[str, Any]:
    """A configuration scraping ``target`` (``host:port``) every ``SCRAPE_INTERVAL_S``."""
    interval = f"{SCRAPE_INTERVAL_S}s"
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval,
                   "evaluation_interval": interval},
        "scrape_configs": [{
            "job_name": job,
            "static_configs": [{"targets": [target], "labels": {"namespace": namespace}}],
        }],
    }


class PrometheusError(AssertionError):
    """The API answered an error (a query that does not parse, a bad parameter)."""


class Prometheus:
    """A client of a running Prometheus' HTTP API (``/api/v1``)."""

    def __init__(self, url: str, client: httpx2.AsyncClient) -> None:
        self.url = url
        self._client = client

    async def _get(self, path: str, params: dict[str, str]) -> Any:
        response = await self._client.get(f"{self.url}{path}", params=params)
        body = response.json()
        if response.status_code != 200 or body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {response.status_code} "
                                  f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    async def query(self, expr: str, at: float | None = None) -> list[Series]:
        """The instant vector ``expr`` evaluates to (now, or at unix time ``at``); a query that
        is not an instant vector (a scalar, a string) raises."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = await self._get("/api/v1/query", params)
        if data["resultType"] != "vector":
            raise PrometheusError(f"{expr}: a {data['resultType']}, not an instant vector")
        return [Series(labels=item["metric"], value=float(item["value"][1]))
                for item in data["result"]]

    async def label_values(self, label: str, match: str | None = None) -> list[str]:
        """The values ``label`` has on the series ``match`` selects, or on any series
        (Grafana's ``label_values``)."""
        params = {} if match is None else {"match[]": match}
        values: list[str] = await self._get(f"/api/v1/label/{label}/values", params)
        return values

    async def wait_until(self, expr: str, timeout_s: float) -> list[Series]:
        """Poll ``expr`` until it returns a series whose value is not 0; that result."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = await self.query(expr)
            if any(series.value for series in result):
                return result
            assert time.monotonic() < deadline, f"{expr} stayed empty or 0 for {timeout_s}s"
            await asyncio.sleep(SCRAPE_INTERVAL_S / 2)


@asynccontextmanager
async def running_prometheus(
    target: str, directory: Path, *, job: str, namespace: str, timeout_s: float = 60.0
) -> AsyncIterator[Prometheus]:
    """A Prometheus scraping ``target`` (``host:port``) as ``job`` in ``namespace``; its
    configuration, storage and log in ``directory``. Ready, with ``target`` scraped up."""
    binary = find_tool("prometheus")
    assert binary is not None, "prometheus is not installed: run `make prometheus`"
    config = _write_config(directory, scrape_config(target, job, namespace))
    port = free_port()
    log_path = directory / "prometheus.log"
    with _open_log(log_path) as log:
        process = await asyncio.create_subprocess_exec(
            binary, f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
            stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
        )
    try:
        async with httpx2.AsyncClient(trust_env=False, timeout=10) as client:
            url = f"http://127.0.0.1:{port}"
            await _wait_ready(client, url, process, log_path, timeout_s)
            prometheus = Prometheus(url, client)
            await prometheus.wait_until(f'up{{job="{job}"}}', timeout_s)
            yield prometheus
    finally:
        if process.returncode is None:
            process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()


def _write_config(directory: Path, config: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _open_log(path: Path) -> IO[bytes]:
    return path.open("wb")


def _read_log(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


async def _wait_ready(client: httpx2.AsyncClient, url: str, process: asyncio.subprocess.Process,
                      log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.returncode is None, (
            f"prometheus exited ({process.returncode}): {_read_log(log_path)}")
        try:
            if (await client.get(f"{url}/-/ready")).status_code == 200:
                return
        except httpx2.TransportError:
            pass  # not listening yet
        assert time.monotonic() < deadline, f"prometheus not ready in {timeout_s}s"
        await asyncio.sleep(0.1)
