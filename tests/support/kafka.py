"""A broker of a test's own, for the tests that stop, restart or reconfigure one (broker
faults, SASL): never the shared broker the other tests use (``scripts/kafka/broker.py``,
behind the ``kafka`` fixture in ``tests/conftest.py``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

from scripts.kafka.broker import KAFKA_LOCAL, START_TIMEOUT_S, STOP_TIMEOUT_S, kafka_local
from tests.support.ports import free_port_block

__all__ = ["KAFKA_LOCAL", "START_TIMEOUT_S", "STOP_TIMEOUT_S", "free_port_pair",
           "kafka_local", "kafka_local_async", "own_kafka_local"]


def free_port_pair() -> int:
    """A port P with P and P+1 free (kafka-local's PLAINTEXT and controller ports)."""
    return free_port_block(2)


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
