"""Raw downloads streamed chunk by chunk, so a 50 MB file never sits whole in the server.

The store's ``iter_bytes`` reads in one LMDB read transaction, which belongs to the thread that
opened it; Starlette would pull a plain iterator from whichever worker thread is free.  So one
thread of its own reads the stream into a small bounded queue and the response takes from it:
at most :data:`AHEAD` chunks are held, and a client that goes away stops the reader.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

#: Chunks read ahead of the client.
AHEAD = 4
_DONE = object()


def stream(open_pieces: Callable[[], Iterator[bytes]]) -> AsyncIterator[bytes]:
    """The pieces of ``open_pieces()``, read in a thread of their own, as an async iterator."""
    from starlette.concurrency import run_in_threadpool

    box: queue.Queue[Any] = queue.Queue(AHEAD)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                box.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        pieces = open_pieces()
        try:
            for piece in pieces:
                if not put(piece):
                    return
            put(_DONE)
        except BaseException as exc:  # handed to the response, which ends the download
            put(exc)
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()

    def take() -> object:
        # a timeout, so that a worker thread never waits forever on a reader that stopped
        while True:
            try:
                return box.get(timeout=0.2)
            except queue.Empty:
                if stop.is_set():
                    return _DONE

    async def pieces() -> AsyncIterator[bytes]:
        thread = threading.Thread(target=read, name="snapstore-ui-download", daemon=True)
        thread.start()
        try:
            while True:
                item = await run_in_threadpool(take)
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                assert isinstance(item, bytes)
                yield item
        finally:
            stop.set()

    return pieces()


__all__ = ["stream"]
