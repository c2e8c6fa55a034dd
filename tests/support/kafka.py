"""A broker of a test's own, for the tests that stop, restart or reconfigure one (broker
faults, SASL): never the shared broker the other tests use (``scripts/kafka/broker.py``,
behind the ``kafka`` fixture in ``tests/conftest.py``)."""

from __future__ import annotations

import asyncio
import os
import random
import socket
from collections.abc import Iterator

from scripts.kafka.broker import KAFKA_LOCAL, START_TIMEOUT_S, STOP_TIMEOUT_S, kafka_local

__all__ = ["KAFKA_LOCAL", "START_TIMEOUT_S", "STOP_TIMEOUT_S", "free_port_pair",
           "kafka_local", "kafka_local_async", "own_kafka_local"]


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pair() -> int:
    """A port P with P and P+1 free (kafka-local's PLAINTEXT and controller ports)."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 30000)
        if _free(port) and _free(port + 1):
            return port
    raise RuntimeError("no two free consecutive ports")


async def kafka_local_async(command: str, port: int) -> None:
    """``KAFKA_PORT=port scripts/kafka-local COMMAND`` without blocking the event loop;
    raises RuntimeError when it fails."""
    process = await asyncio.create_subprocess_exec(
        str(KAFKA_LOCAL), *command.split(), env={**os.environ, "KAFKA_PORT": str(port)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"kafka-local {command} failed:\n{out.decode()}{err.decode()}")


def own_kafka_local() -> Iterator[tuple[str, int]]:
    """A kafka-local broker on a free port, (address, port); stopped and its data deleted
    afterwards. Wrap it in a fixture of the scope the test needs."""
    port = free_port_pair()
    try:
        started = kafka_local("start", port)
        if started.returncode != 0:
            raise RuntimeError(f"kafka-local start failed:\n{started.stderr}")
        yield f"127.0.0.1:{port}", port
    finally:
        kafka_local("stop --clean", port)
