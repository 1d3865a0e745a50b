"""Content-defined chunking: where byte streams are cut into chunks.

Chunk boundaries are part of the storage format: if they moved, an upgraded snapstore would
store every file again instead of deduplicating against what is there.  The parameters below are
therefore pinned (and recorded in each store's meta); tests/test_chunker.py keeps a golden list of
boundaries for a fixed input so that an upgrade of pyfastcdc that moves them is caught.

Two chunkers exist:

* file contents go through FastCDC 2020 (pyfastcdc, compiled; releases the GIL while cutting);
* record streams (manifests, conversations) are cut *between records*, after a record whose key
  hash meets a mask.  Every chunk then holds whole records, so two manifests that share a chunk
  share exactly those entries and a diff can skip it without decoding it, and a change to one
  entry's content never moves a boundary (the key is the path, not the content).
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, BinaryIO, Literal

if TYPE_CHECKING:
    from pyfastcdc import FastCDC

#: FastCDC parameters for file contents.  Changing any of these is a format change.
MIN_SIZE = 8 * 1024
AVG_SIZE = 32 * 1024
MAX_SIZE = 128 * 1024
NORMALIZATION: Literal[0, 1, 2, 3] = 1
SEED = 0

#: Record chunker: a boundary after a record whose key's CRC-32 has these low bits clear
#: (1 in 32 records on average), or when a chunk would exceed RECORD_MAX_BYTES.
RECORD_MASK = 31
RECORD_MAX_BYTES = 64 * 1024

#: Message chunker (conversations): a boundary after each message once the chunk holds at least
#: MESSAGE_MIN_BYTES.  Conversations only grow (or are cut back on a rewind), so boundaries that
#: depend on the bytes since the previous boundary stay put, and a conversation that grew by k
#: messages shares every chunk but the last with its previous version.
MESSAGE_MIN_BYTES = 1024

PARAMS = {
    "fastcdc": {
        "min": MIN_SIZE,
        "avg": AVG_SIZE,
        "max": MAX_SIZE,
        "nc": NORMALIZATION,
        "seed": SEED,
    },
    "records": {"mask": RECORD_MASK, "max_bytes": RECORD_MAX_BYTES},
    "messages": {"min_bytes": MESSAGE_MIN_BYTES},
}

_local = threading.local()


def _fastcdc() -> FastCDC:
    # A FastCDC object is not safe to share between threads; one per thread is cheap.  The
    # import is deferred: a snapshot that reads no file (nothing changed) never needs it.
    cdc: FastCDC | None = getattr(_local, "cdc", None)
    if cdc is None:
        from pyfastcdc import FastCDC

        cdc = FastCDC(
            AVG_SIZE,
            min_size=MIN_SIZE,
            max_size=MAX_SIZE,
            normalized_chunking=NORMALIZATION,
            seed=SEED,
        )
        _local.cdc = cdc
    return cdc


def one_chunk(size: int) -> bool:
    """Whether bytes of this size are one chunk whatever they hold (FastCDC cuts nothing
    before MIN_SIZE): a reader may then hash them as one, without the chunker."""
    return size <= MIN_SIZE


def cut_buffer(data: bytes | memoryview) -> Iterator[memoryview]:
    """Yield the chunks of an in-memory buffer (views into ``data``)."""
    view = memoryview(data)
    if one_chunk(len(view)):
        yield view
        return
    for chunk in _fastcdc().cut_buf(view):
        yield chunk.data


def cut_stream(stream: BinaryIO) -> Iterator[bytes]:
    """Yield the chunks of a readable binary stream, holding at most ~2 * MAX_SIZE in memory.

    Each chunk is returned as its own ``bytes`` (the chunker reuses its buffer).
    An empty stream yields one empty chunk, so that every stream has at least one chunk.
    """
    empty = True
    for chunk in _fastcdc().cut_stream(stream):
        empty = False
        yield bytes(chunk.data)
    if empty:
        yield b""


def cut_records(records: Iterable[tuple[bytes, bytes]]) -> Iterator[list[bytes]]:
    """Group encoded records into chunks; each record is ``(key, encoded_bytes)``.

    A chunk ends after a record whose ``crc32(key) & RECORD_MASK == 0``, or before a record that
    would take it past RECORD_MAX_BYTES.  Yields lists of encoded records; yields nothing for no
    records.
    """
    group: list[bytes] = []
    size = 0
    for key, encoded in records:
        if group and size + len(encoded) > RECORD_MAX_BYTES:
            yield group
            group, size = [], 0
        group.append(encoded)
        size += len(encoded)
        if zlib.crc32(key) & RECORD_MASK == 0:
            yield group
            group, size = [], 0
    if group:
        yield group


def ends_chunk(key: bytes) -> bool:
    """Whether a record with this key ends its chunk (the key rule of :func:`cut_records`)."""
    return not zlib.crc32(key) & RECORD_MASK


def cut_record_bytes(keys: Sequence[bytes], encoded: Sequence[bytes]) -> Iterator[tuple[int, bytes]]:
    """:func:`cut_records` for records given as two parallel lists; yields each chunk as
    ``(index just past its last record, its bytes)``.

    The same cuts, found in bulk: the records whose key ends a chunk are found in one pass of C
    calls, and the size rule is applied only inside a run that could exceed RECORD_MAX_BYTES.
    Several times faster than one Python step per record (docs/benchmarks-design.md).
    """
    crc, mask = zlib.crc32, RECORD_MASK
    ends = [i for i, k in enumerate(keys) if not crc(k) & mask]
    start = 0
    for stop in [*ends, len(keys) - 1]:  # (a last run that is empty is skipped)
        run = encoded[start : stop + 1]
        start = stop + 1
        if not run:
            continue
        data = b"".join(run)
        if len(data) <= RECORD_MAX_BYTES:
            yield start, data
            continue
        group: list[bytes] = []
        size = 0
        at = start - len(run)
        for item in run:  # the rare run past the limit: the size rule, record by record
            if group and size + len(item) > RECORD_MAX_BYTES:
                yield at, b"".join(group)
                group, size = [], 0
            group.append(item)
            size += len(item)
            at += 1
        yield at, b"".join(group)


def cut_messages(records: Iterable[bytes]) -> Iterator[list[bytes]]:
    """Group encoded messages into chunks of at least MESSAGE_MIN_BYTES (the last may be less)."""
    group: list[bytes] = []
    size = 0
    for encoded in records:
        group.append(encoded)
        size += len(encoded)
        if size >= MESSAGE_MIN_BYTES:
            yield group
            group, size = [], 0
    if group:
        yield group
