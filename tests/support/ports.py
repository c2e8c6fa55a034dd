"""A loopback port that was free a moment ago: nothing listens on it (until someone binds)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """Bind port 0 on 127.0.0.1, read the port the kernel chose, and let it go."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
