"""What a snapshot reports (:class:`SnapshotResult`).  (The phases hand each other writes as
:data:`snapstore.storage.packs.Op`: ``(table, key, value)``.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snapstore.tree import scan

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from snapstore.records.manifest import Entry


class SnapshotResult:
    """What a snapshot did: the entries, the counts, the warnings."""

    # (A plain class, not a dataclass: importing dataclasses would slow every CLI process's start.)
    __slots__ = (
        "entries", "manifest_id", "conversation_id", "added", "modified", "deleted",
        "files_read", "bytes_read", "new_bytes", "reused", "found", "report", "changed", "totals",
        "parent_damaged",
    )  # fmt: skip

    def __init__(
        self,
        entries: Sequence[Entry],
        manifest_id: bytes,
        conversation_id: bytes | None,
        *,
        found: list[scan.Found] | Mapping[bytes, scan.Found] | None = None,
        report: scan.ScanReport | None = None,
    ) -> None:
        self.entries = entries
        self.manifest_id = manifest_id
        self.conversation_id = conversation_id
        self.added = self.modified = self.deleted = 0
        self.files_read = self.bytes_read = self.new_bytes = 0
        self.reused = False
        #: The parent's manifest could not be read (ops.snapshot.counts.against_parent).
        self.parent_damaged = False
        #: The walk's records: only for a SAFETY checkpoint or a watching context (after a
        #: watcher's patch, the tree state's map of them).
        self.found: list[scan.Found] | Mapping[bytes, scan.Found] = found if found is not None else []
        self.report = report if report is not None else scan.ScanReport()
        #: The paths whose entries differ from the parent's (the ``paths`` index rows).
        self.changed: list[bytes] = []
        #: ``(files, bytes)`` of the entries when known without a pass over them.
        self.totals: tuple[int, int] | None = None
