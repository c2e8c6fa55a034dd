"""Certificate files of one test run (made by ``scripts/kafka/certs.py``, as the test brokers'
are) and a TLS server on loopback that only shakes hands: for the worker's TLS failures
without a broker (``tests/unit/kafka/test_security*.py``)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from scripts.kafka import certs

KEY_PASSWORD = "key-Pass-Secret-93"


# -- certificates (scripts/kafka/certs.py, as the test brokers' are made) ------------------------

BROKER_HOSTS = ("127.0.0.1", "broker.test")  # not localhost: the hostname mismatch


def write_cert(path: Path, issued: certs.Issued) -> str:
    path.write_bytes(certs.cert_pem(issued))
    return str(path)


def write_key(path: Path, issued: certs.Issued, password: str | None = None) -> str:
    path.write_bytes(certs.key_pem(issued, password))
    return str(path)


@dataclass(frozen=True)
class Pki:
    """Files of one run: the CA the worker trusts, broker and client certificates."""

    dir: Path
    ca: trustme.CA
    cafile: str
    client_cert: str
    client_key: str  # encrypted with KEY_PASSWORD
    foreign_client_cert: str  # signed by a CA the broker does not trust
    foreign_client_key: str

    def leaf(self, name: str, *, expired: bool = False,
             ca: trustme.CA | None = None) -> tuple[str, str]:
        broker = certs.issue(ca or self.ca, "broker", hosts=BROKER_HOSTS, expired=expired)
        return (write_cert(self.dir / f"{name}.crt", broker),
                write_key(self.dir / f"{name}.key", broker))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca, foreign = certs.make_ca("Test CA"), certs.make_ca("Foreign CA")
    client, foreign_client = certs.issue(ca, "worker"), certs.issue(foreign, "worker")
    return Pki(
        dir=directory, ca=ca, cafile=write_cert(directory / "ca.crt", ca),
        client_cert=write_cert(directory / "client.crt", client),
        client_key=write_key(directory / "client.key", client, KEY_PASSWORD),
        foreign_client_cert=write_cert(directory / "foreign.crt", foreign_client),
        foreign_client_key=write_key(directory / "foreign.key", foreign_client),
    )


# -- a TLS server on loopback ------------------------------------------------------------------


class TlsServer:
    """Accepts TLS on 127.0.0.1 (a thread; blocking sockets, so a refusal sends its alert)
    and closes each connection after the handshake: no Kafka behind it."""

    def __init__(self, certfile: str, keyfile: str, client_cafile: str | None = None) -> None:
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(certfile, keyfile)
        if client_cafile is not None:  # mutual TLS
            self._context.verify_mode = ssl.CERT_REQUIRED
            self._context.load_verify_locations(client_cafile)
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self.handshakes = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._socket.accept()
            except OSError:
                return  # closed
            conn.settimeout(5)
            tls = self._context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
            try:
                tls.do_handshake()
                self.handshakes += 1
                tls.recv(64)
                tls.close()
            except OSError:  # the handshake failed, its alert sent: the client says why
                _close_gently(socket.socket(fileno=tls.detach()))

    def close(self) -> None:
        self._socket.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self._socket.close()
        self._thread.join(timeout=5)


def _close_gently(conn: socket.socket) -> None:
    """Close after reading what the client sent: closing with unread bytes would send a TCP
    reset, which can overtake the TLS alert (the client would see a bare reset)."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
        while conn.recv(4096):
            pass
    conn.close()
