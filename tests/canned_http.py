"""A one-answer HTTP server on 127.0.0.1 for the S3 client's error paths (an engine answering
503 SlowDown, one ignoring Range): every request gets the same canned response."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Canned:
    def __init__(self, port: int) -> None:
        self.port = port
        self.hits = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def canned(status: str, body: bytes, headers: str = "") -> Iterator[Canned]:
    """Serve ``HTTP/1.1 <status>`` with ``body`` to every request until the block ends."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    state = Canned(server.getsockname()[1])
    head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{headers}Connection: close\r\n\r\n".encode()

    def serve() -> None:
        while True:
            try:
                c, _ = server.accept()
            except OSError:
                return
            c.recv(65536)
            state.hits += 1
            c.sendall(head + body)
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield state
    finally:
        server.close()
