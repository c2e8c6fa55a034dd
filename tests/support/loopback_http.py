"""A threaded HTTP server on loopback for fakes written as a ``BaseHTTPRequestHandler``."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackHTTP:
    """Serves ``handler`` on 127.0.0.1, on a free port, from a daemon thread until ``close``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        """Stop serving and free the port (a handler still busy ends as its thread dies)."""
        self._server.shutdown()
        self._server.server_close()
