"""Where the tests get a real Kafka broker from.

`kafka_bootstrap()` picks, in this order:

1. ``KAFKA_BOOTSTRAP_SERVERS`` when set: a broker someone else runs (nothing to clean up);
2. a testcontainers ``KafkaContainer`` in KRaft mode when a Docker engine answers (the
   cleanup stops the container);
3. ``scripts/kafka-local start``: a broker from Maven Central jars on 127.0.0.1, for
   machines without Docker. It is left running on purpose (the cleanup does nothing), so
   later test sessions reuse it; the Makefile / CI script stops it.

`restart_local_kafka()` stops and starts a kafka-local broker on the same port, with its
data kept, for broker-fault tests.

Plain Python on purpose (no pytest import): fixtures, benchmarks and scripts can all use it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
KAFKA_LOCAL = REPO_ROOT / "scripts" / "kafka-local"

# Confluent's image, because testcontainers' KafkaContainer drives Confluent's start
# scripts; 7.9 (Apache Kafka 3.9) is the newest line that class is known to start in KRaft
# mode. Override with KAFKA_TESTCONTAINERS_IMAGE.
DEFAULT_TESTCONTAINERS_IMAGE = "confluentinc/cp-kafka:7.9.0"
DEFAULT_LOCAL_PORT = 9092
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost"})

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
    return _run_kafka_local("start", _local_port()), _noop


def restart_local_kafka(bootstrap: str | None = None) -> str:
    """Stop, then start again, the kafka-local broker behind `bootstrap`; return its address.

    The port comes from `bootstrap` (a 127.0.0.1/localhost address), else from KAFKA_PORT,
    else 9092. The data dir is kept, so topics and committed offsets survive. A broker that
    is already stopped is just started. Raises RuntimeError when `bootstrap` is not a local
    address or kafka-local fails; check `local_kafka_running()` first to skip a fault test
    when the tests run against testcontainers or a remote broker.
    """
    port = _port_of(bootstrap) if bootstrap else _local_port()
    _run_kafka_local("stop", port)
    return _run_kafka_local("start", port)


def local_kafka_running(port: int | None = None) -> bool:
    """True when `scripts/kafka-local status` reports a broker answering on `port`."""
    result = subprocess.run(
        [str(KAFKA_LOCAL), "status"],
        env=_local_env(port if port is not None else _local_port()),
        capture_output=True,
        text=True,
        timeout=STOP_TIMEOUT_S,
        check=False,
    )
    return result.returncode == 0


def _local_port() -> int:
    return int(os.environ.get("KAFKA_PORT", str(DEFAULT_LOCAL_PORT)))


def _port_of(bootstrap: str) -> int:
    first = bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    if host not in LOCAL_HOSTS or not port.isdigit():
        raise RuntimeError(f"{bootstrap!r} is not a scripts/kafka-local broker address")
    return int(port)


def _local_env(port: int) -> dict[str, str]:
    return {**os.environ, "KAFKA_PORT": str(port)}


def _run_kafka_local(command: str, port: int) -> str:
    """Run `scripts/kafka-local COMMAND`; return the last line of its stdout."""
    timeout = START_TIMEOUT_S if command == "start" else STOP_TIMEOUT_S
    result = subprocess.run(
        [str(KAFKA_LOCAL), command],
        env=_local_env(port),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"scripts/kafka-local {command} (KAFKA_PORT={port}) failed with exit code "
            f"{result.returncode}:\n{result.stderr.strip()}"
        )
    lines = result.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"scripts/kafka-local {command} printed nothing on stdout")
    return lines[-1].strip()


def _docker_available() -> bool:
    """True when a Docker engine answers a ping (the docker package comes with testcontainers).

    Imported dynamically: the package is optional here and ships no type information.
    """
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
