#!/usr/bin/env python3
"""Readiness probe for scripts/kafka-local: does a broker answer a Metadata request?

Standard library only, so it runs with any python3 (no venv needed). It sends one
Metadata v4 request (the oldest version Kafka 4.x still serves; v0-v3 were removed by
KIP-896) asking for no topics, and succeeds when the answer lists at least one broker:
that means the socket server is up *and* the broker has caught up with the KRaft metadata
log and registered, which an open port alone does not prove.

Usage: probe.py HOST:PORT [TIMEOUT_SECONDS]   (exit 0 = ready, 1 = not ready)
"""

from __future__ import annotations

import socket
import struct
import sys

METADATA_API_KEY = 3
METADATA_VERSION = 4
CORRELATION_ID = 0x4B4C  # any value; checked on the way back


def _request() -> bytes:
    client_id = b"kafka-local-probe"
    header = struct.pack(
        ">hhih", METADATA_API_KEY, METADATA_VERSION, CORRELATION_ID, len(client_id)
    )
    # topics: empty array (not null, which would mean "all topics");
    # allow_auto_topic_creation: false.
    body = struct.pack(">ib", 0, 0)
    payload = header + client_id + body
    return struct.pack(">i", len(payload)) + payload


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        buf += chunk
    return buf


def probe(host: str, port: int, timeout: float) -> int:
    """Return the number of brokers in the Metadata answer."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(_request())
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        resp = _recv_exact(sock, size)
    correlation_id, _throttle_ms, n_brokers = struct.unpack_from(">iii", resp, 0)
    if correlation_id != CORRELATION_ID:
        raise ValueError(f"unexpected correlation id {correlation_id}")
    return int(n_brokers)


def main() -> int:
    host, _, port = sys.argv[1].rpartition(":")
    timeout = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    try:
        return 0 if probe(host or "127.0.0.1", int(port), timeout) >= 1 else 1
    except (OSError, ValueError, struct.error):
        return 1


if __name__ == "__main__":
    sys.exit(main())
