"""Reading a store: listing, resolving, diffs, file contents, conversations, verify."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from snapstore.errors import RefError
from snapstore.facade.base import StoreBase
from snapstore.records import manifest
from snapstore.records.checkpoint import Checkpoint, load_one
from snapstore.records.manifest import Entry
from snapstore.storage import objects
from snapstore.tree.paths import display, from_user

# diff, renames, conversation (json), refs and the oplog are imported where they are used: a
# snapshot from the command line needs none of them, and each import costs its start-up.
if TYPE_CHECKING:
    from snapstore.ops.diff import Change
    from snapstore.ops.history import Version
    from snapstore.ops.textdiff import LineCounts
    from snapstore.ops.verify import VerifyReport


class ReadingMixin(StoreBase):
    """The read-only methods (no writer lock)."""

    def history(
        self, path: str | bytes, *, task: str | None = None, limit: int | None = None
    ) -> list[Version]:
        """The checkpoints in which ``path`` changed, oldest first, with lines +/-.

        Through the ``paths`` index it reads the log's keys, the path's rows and the records
        around each version, not every checkpoint record (:mod:`snapstore.ops.pathlog`).
        With ``limit``, only the newest ``limit`` versions.
        """
        from snapstore.ops.pathlog import path_versions

        return path_versions(self.backend, from_user(path), task, limit, lambda: list(reversed(self.checkpoints(task=task))))

    def summary(self, ref: str, *, task: str | None = None, renames: bool = False) -> dict[str, Any]:
        """What an agent UI shows for a checkpoint: the record, changed files with +/- counts
        (``not_counted``: the size of a file too large to count), the conversation's size and
        last messages (``None`` when none is stored)."""
        from snapstore.records import conversation

        cp = self.resolve(ref, task=task)
        found = self.changes(cp.id, renames=renames)
        changes = [{**c.to_json(), **n.to_json()} for c, n in zip(found, self.line_counts(found))]
        convo = None
        if cp.conversation is not None:
            convo = conversation.preview(self.conversation(cp.id) or [])
        return {**cp.to_json(), "changes": changes, "conversation": convo}

    def diff(
        self,
        a: str = "latest",
        b: str | None = None,
        paths: list[str] | None = None,
        *,
        renames: bool = False,
    ) -> list[Change]:
        """Changes from checkpoint ``a`` to checkpoint ``b`` (the working tree when None).

        Two checkpoints are compared through their manifests alone (shared manifest chunks are
        skipped undecoded); the working tree through the stat cache (unchanged files are not
        read).  Each Change gives lazy access to its old and new bytes.  With ``renames`` a
        deleted and an added file that are the same file moved become one ``R`` change
        (:mod:`snapstore.ops.renames`).
        """
        from snapstore.ops import diff as diff_mod
        from snapstore.ops.restore import selector
        from snapstore.ops.snapshot import current_tree

        sel = selector(paths)
        old_cp = self.resolve(a)
        with self.backend.read() as view:
            if b is None:
                old, new = current_tree.difference(self.context, view, old_cp.manifest)
                new_loader = self.context.read_disk
            else:
                new_cp = self.resolve(b)
                old, new = diff_mod.manifest_difference(view.get, old_cp.manifest, new_cp.manifest)
                new_loader = self.context.read_stored
        old = {p: e for p, e in old.items() if sel(p)}
        new = {p: e for p, e in new.items() if sel(p)}
        changes = diff_mod.with_loaders(diff_mod.compare(old, new), self.context.read_stored, new_loader)
        return _detect_renames(changes) if renames else changes

    def numbered_checkpoints(
        self, *, task: str | None = None, include_safety: bool = False, limit: int | None = None
    ) -> list[tuple[int | None, Checkpoint]]:
        """What ``list`` shows: newest first, each with its ``#N`` reference (None for safety
        checkpoints, which are listed only with ``include_safety``).  With ``limit`` only the
        records of the rows shown are read."""
        from snapstore.records import log_pages

        with self.backend.read() as view:
            return log_pages.numbered(view, task, include_safety, limit)

    def log_page(
        self,
        *,
        before: int | None = None,
        limit: int = 200,
        task: str | None = None,
        include_safety: bool = False,
        keep: Callable[[Checkpoint], bool] | None = None,
        scan: int | None = None,
    ) -> tuple[list[Checkpoint], int | None]:
        """One page of the log, newest first, for a UI that pages: up to ``limit`` checkpoints
        whose log number (``seq``, which never changes) is below ``before``, of ``task`` when
        given, that ``keep`` accepts (it must not read the store); and the ``before`` of the
        next page (None: nothing older).  At most ``scan`` records are read (a filtered page
        may hold fewer rows); newer records are skipped unread."""
        from snapstore.records import log_pages

        with self.backend.read() as view:
            return log_pages.page(
                view, before=before, limit=limit, task=task, include_safety=include_safety, keep=keep, scan=scan
            )

    def log_neighbours(
        self, ref: str, *, include_safety: bool = False
    ) -> tuple[Checkpoint, Checkpoint | None, Checkpoint | None]:
        """Checkpoint ``ref`` with its log number (``seq``) set, and the checkpoints just newer
        and just older than it in the log (safety ones skipped unless ``include_safety``)."""
        from snapstore.records import log_pages

        cp = self.resolve(ref)
        with self.backend.read() as view:
            return log_pages.neighbours(view, cp, include_safety)

    def line_counts(self, changes: list[Change]) -> list[LineCounts]:
        """Lines added and removed by each change, as ``diff --stat`` shows them (binary files
        and files too large to count say so instead)."""
        from snapstore.ops import textdiff

        return [textdiff.count(c) for c in changes]

    def entries(self, ref: str) -> list[Entry]:
        """The manifest entries of checkpoint ``ref``, in path order."""
        cp = self.resolve(ref)
        with self.backend.read() as view:
            return list(manifest.iter_entries(view.get, cp.manifest))

    def changes(self, ref: str, *, renames: bool = False) -> list[Change]:
        """What checkpoint ``ref`` changed against its parent (with lazy old/new bytes);
        ``renames`` as in :meth:`diff`."""
        from snapstore.ops import diff as diff_mod

        cp = self.resolve(ref)
        with self.backend.read() as view:
            parent = None
            if cp.parent and view.get("checkpoints", bytes.fromhex(cp.parent)) is not None:
                parent = load_one(view, bytes.fromhex(cp.parent))
            old: dict[bytes, Entry]
            if parent is None:
                old, new = {}, manifest.load(view.get, cp.manifest)
            else:
                old, new = diff_mod.manifest_difference(view.get, parent.manifest, cp.manifest)
        changes = diff_mod.with_loaders(diff_mod.compare(old, new), self.context.read_stored, self.context.read_stored)
        return _detect_renames(changes) if renames else changes

    def iter_bytes(self, ref: str, path: str | bytes) -> Iterator[bytes]:
        """The content of ``path`` in checkpoint ``ref``, chunk by chunk (each chunk verified)."""
        cp = self.resolve(ref)
        rel = from_user(path)
        with self.backend.read() as view:
            entry = _find_entry(view.get, cp, rel)
            if not entry.is_file:
                if entry.kind == manifest.SYMLINK:
                    raise RefError(f"{display(rel)} is a symlink in {cp.short_id} (to {display(entry.ref)})")
                raise RefError(f"{display(rel)} is not a file in checkpoint {cp.short_id}")
            yield from objects.iter_stream(view.get, entry.ref)

    def file_info(self, ref: str, path: str | bytes) -> dict[str, Any]:
        """What checkpoint ``ref`` records for ``path``: kind, mode, size and content hash (the
        BLAKE3 of its bytes, which ``edit(expected=...)`` compares with), without reading it."""
        cp = self.resolve(ref)
        rel = from_user(path)
        with self.backend.read() as view:
            entry = _find_entry(view.get, cp, rel)
        info: dict[str, Any] = {
            "checkpoint": cp.id,
            "path": os.fsdecode(rel),
            "kind": manifest.KIND_NAMES.get(entry.kind, str(entry.kind)),
            "mode": f"{entry.mode:o}",
            "size": entry.size,
        }
        if entry.is_file:
            info["hash"] = entry.ref.hex()
        elif entry.kind == manifest.SYMLINK:
            info["target"] = os.fsdecode(entry.ref)
        return info

    def read_bytes(self, ref: str, path: str | bytes) -> bytes:
        """The exact bytes of ``path`` (root-relative) in checkpoint ``ref``."""
        return b"".join(self.iter_bytes(ref, path))

    def conversation(self, ref: str) -> list[Any] | None:
        """The conversation stored with checkpoint ``ref``, or None when it has none."""
        return self._conversation_of(self.resolve(ref))

    def verify(self, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
        """Re-read and re-hash everything; the report lists every problem found."""
        from snapstore.ops import verify

        return verify.run(self.backend, progress, self.excluded)


def _detect_renames(changes: list[Change]) -> list[Change]:
    from snapstore.ops.renames import detect

    return detect(changes)


def _find_entry(get: Callable[[str, bytes], bytes | None], cp: Checkpoint, rel: bytes) -> Entry:
    found = manifest.find(get, cp.manifest, rel)
    if found is not None:
        return found
    raise RefError(f"{display(rel) or '.'} is not in checkpoint {cp.short_id}")
