"""When automatic maintenance is due because of the store file's size, and when it compacts
the file (:mod:`snapstore.ops.maintenance` runs the passes).  Nothing imported: a snapshot's
check after every checkpoint reads these rules (tests/test_lean_cli.py keeps that path free of
the maintenance module's imports)."""

from __future__ import annotations

#: ``Store.maintain`` compacts the store file after a pass that leaves more than this fraction
#: of it free pages (LMDB reuses them but never shrinks the file)...
FREE_COMPACT = 0.1
#: ...when at least this many bytes are free (a page or two is not worth a copy)...
COMPACT_ABOVE = 16 << 10
#: ...and the file is at most this large: compaction copies the file under the writer lock,
#: so this bounds how long a checkpoint can wait for automatic maintenance (larger stores are
#: compacted by ``gc --compact``).
COMPACT_MAX = 256 << 20
#: After a snapshot, maintenance is due (whatever ``maintenance.checkpoints`` says) once the
#: store file is this many times its size at the end of the last maintenance (:data:`SIZE_KEY`;
#: at least :data:`GROWTH_FLOOR`): the bound that keeps a store as agents leave it near its
#: compacted size.
GROWTH = 1.25
GROWTH_FLOOR = 64 << 10
#: The meta key holding the base of the growth rule (:func:`growth_base`), set at the end of
#: the last maintenance.
SIZE_KEY = b"maintenance:size"


def compaction_due(file_size: int, used: int) -> bool:
    """Whether automatic maintenance compacts a store file of ``file_size`` bytes whose tables
    take ``used`` bytes of pages (:data:`FREE_COMPACT`, :data:`COMPACT_ABOVE`,
    :data:`COMPACT_MAX`)."""
    free = file_size - used
    return file_size <= COMPACT_MAX and free >= COMPACT_ABOVE and free > FREE_COMPACT * file_size


def grown(file_size: int, raw_base: bytes | None) -> bool:
    """Whether the store file has grown past :data:`GROWTH` times its size at the end of the
    last maintenance (``raw_base``: :data:`SIZE_KEY`'s value; absent or damaged: the floor)."""
    try:
        base = int(raw_base) if raw_base is not None else 0
    except ValueError:
        base = 0
    return file_size > GROWTH * max(base, GROWTH_FLOOR)


def growth_base(file_size: int, used: int) -> int:
    """The growth rule's base after maintenance, for a store file of ``file_size`` bytes whose
    tables take ``used``: the size a compacted file would have, plus :data:`COMPACT_ABOVE`,
    where automatic maintenance may compact it (the file's own size otherwise).

    Not the file's size: a pass that found too few free pages to compact left them, and the
    checkpoints after it add theirs; grown a quarter past that, the file held up to twice its
    contents, unnoticed (a small store, whose passes race its checkpoints).  From this base a
    grown file always has enough free pages for :func:`compaction_due`."""
    if file_size > COMPACT_MAX:
        return file_size
    return min(file_size, used + COMPACT_ABOVE)
