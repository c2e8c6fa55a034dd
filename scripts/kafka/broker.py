"""Where tests, benchmarks and the demo get a real Kafka broker from, and their topics.

`kafka_bootstrap()` picks, in this order:

1. ``KAFKA_BOOTSTRAP_SERVERS`` when set: a broker someone else runs (nothing to clean up);
2. a testcontainers ``KafkaContainer`` in KRaft mode when a Docker engine answers (the
   cleanup stops the container);
3. ``scripts/kafka-local start``: a broker from Maven Central jars on 127.0.0.1, for
   machines without Docker. It is left running on purpose (the cleanup does nothing), so
   later sessions reuse it; `make kafka-stop` (or the CI script) stops it.

Plain Python on purpose (no pytest import, nothing from ``tests/``), so that ``benchmarks/``
and ``scripts/`` use it without depending on the tests.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

KAFKA_LOCAL = Path(__file__).resolve().parent.parent / "kafka-local"

# Confluent's image, because testcontainers' KafkaContainer drives Confluent's start
# scripts; 7.9 (Apache Kafka 3.9) is the newest line that class is known to start in KRaft
# mode. Override with KAFKA_TESTCONTAINERS_IMAGE.
DEFAULT_TESTCONTAINERS_IMAGE = "confluentinc/cp-kafka:7.9.0"
DEFAULT_LOCAL_PORT = 9092
DOCKER_SOCKET = "/var/run/docker.sock"  # where docker.from_env looks without DOCKER_HOST

# Generous: the first kafka-local start downloads the jars with Maven.
START_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 120.0


def _noop() -> None:
    return None


def kafka_bootstrap() -> tuple[str, Callable[[], None]]:
    """Return a broker's bootstrap address and a callable that releases it."""
    env_address = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if env_address:
        return env_address, _noop
    if _docker_available():
        return _start_testcontainer()
    return start_local_kafka(), _noop


def start_local_kafka(port: int | None = None) -> str:
    """``scripts/kafka-local start`` (a running broker is found, not restarted) on ``port``,
    else KAFKA_PORT, else 9092; its bootstrap address. Raises RuntimeError when it fails."""
    port = port if port is not None else int(os.environ.get("KAFKA_PORT", DEFAULT_LOCAL_PORT))
    result = kafka_local("start", port)
    if result.returncode != 0:
        raise RuntimeError(
            f"scripts/kafka-local start (KAFKA_PORT={port}) failed with exit code "
            f"{result.returncode}:\n{result.stderr.strip()}"
        )
    lines = result.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError("scripts/kafka-local start printed nothing on stdout")
    return lines[-1].strip()  # the last line is the PLAINTEXT address


def kafka_local(
    command: str, port: int, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``KAFKA_PORT=port scripts/kafka-local COMMAND`` (``env`` added); never raises on
    its exit code: the caller reads ``returncode``, ``stdout`` (addresses) and ``stderr``."""
    return subprocess.run(
        [str(KAFKA_LOCAL), *command.split()],
        env={**os.environ, "KAFKA_PORT": str(port), **(env or {})},
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S if command == "start" else STOP_TIMEOUT_S,
        check=False,
    )


async def create_topics(bootstrap: str, partitions: Mapping[str, int]) -> None:
    """Create topics (name -> partition count), each with one replica."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([
            NewTopic(name, num_partitions=count, replication_factor=1)
            for name, count in partitions.items()
        ])
    finally:
        await admin.close()


def _docker_available() -> bool:
    """True when a Docker engine answers a ping (the docker package comes with testcontainers).

    Imported dynamically: the package is optional here and ships no type information.
    """
    if "DOCKER_HOST" not in os.environ and not Path(DOCKER_SOCKET).exists():
        # No engine to ask: docker.from_env would still open (and leak) a socket finding out.
        return False
    try:
        docker: Any = importlib.import_module("docker")
        client = docker.from_env(timeout=5)
    except Exception:  # not installed, no socket, bad DOCKER_HOST: no Docker
        return False
    try:
        return bool(client.ping())
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            client.close()


def _kafka_container_class() -> Any:
    try:
        module = importlib.import_module("testcontainers.community.kafka")
    except ImportError:
        # testcontainers < 4.15 keeps it here; newer ones warn on this path, and the tests
        # turn warnings into errors.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            module = importlib.import_module("testcontainers.kafka")
    return module.KafkaContainer


def _start_testcontainer() -> tuple[str, Callable[[], None]]:
    image = os.environ.get("KAFKA_TESTCONTAINERS_IMAGE", DEFAULT_TESTCONTAINERS_IMAGE)
    container = _kafka_container_class()(image=image).with_kraft()
    # Same single-node settings as scripts/kafka-local, so transactions work on one broker.
    for key, value in {
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "true",
    }.items():
        container.with_env(key, value)
    container.start(timeout=120)
    address = str(container.get_bootstrap_server())

    def cleanup() -> None:
        container.stop()

    return address, cleanup
