"""Loopback ports that were free a moment ago: nothing listens on them (until someone binds)."""

from __future__ import annotations

import random
import socket


def free_port() -> int:
    """Bind port 0 on 127.0.0.1, read the port the kernel chose, and let it go."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# Not the ``random`` module's state: a test may seed it, and two processes of one run
# (pytest-xdist) would then pick the same ports.
_RANDOM = random.SystemRandom()


def free_port_block(count: int) -> int:
    """The first of ``count`` consecutive loopback ports that were all free a moment ago,
    below the kernel's ephemeral range (where a client's own port could land on one)."""
    for _ in range(200):
        first = _RANDOM.randrange(20_000, 32_000 - count)
        if all(_is_free(port) for port in range(first, first + count)):
            return first
    raise RuntimeError(f"no {count} consecutive free ports found")


def _is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
