"""Tags and a change token (for the web UI, :mod:`snapstore.ui`)."""

from __future__ import annotations

from snapstore.errors import RefError, UsageError
from snapstore.facade.base import StoreBase


class TagsMixin(StoreBase):
    """Naming checkpoints, and a cheap token that changes when the history does."""

    def tag(self, ref: str, name: str) -> str | None:
        """Name checkpoint ``ref`` ``name``; returns the id the tag named before (None if new).

        As with ``snapshot --tag``, a tag names one checkpoint: an existing tag moves.
        """
        check_tag(name)
        with self._lock.held():
            cp = self.resolve(ref)
            with self.backend.read() as view:
                before = view.get("tags", name.encode())
            with self.backend.write() as batch:
                batch.put("tags", name.encode(), bytes.fromhex(cp.id))
            self.backend.sync()
        return before.hex() if before is not None else None

    def untag(self, name: str) -> str:
        """Remove tag ``name`` (RefError if there is none); returns the id it named."""
        with self._lock.held():
            with self.backend.read() as view:
                before: bytes | None = view.get("tags", name.encode())
            if before is None:
                raise RefError(f"no tag {name!r}")
            with self.backend.write() as batch:
                batch.delete("tags", name.encode())
            self.backend.sync()
        return before.hex()

    def revision(self) -> str:
        """A short token that changes whenever checkpoints, tags or operations change.

        Cheap (no record is decoded): a UI polls it to know when to refresh.
        """
        import blake3

        h = blake3.blake3()
        with self.backend.read() as view:
            for table in ("log", "oplog"):
                last = next(iter(view.items(table, reverse=True)), None)
                h.update(b"%d:" % view.count(table) + (last[0] if last else b"-"))
            for key, value in view.items("tags"):
                h.update(key + b"\0" + value)
        return h.hexdigest()[:16]


def check_tag(tag: str) -> None:
    """Refuse (UsageError) a tag name a reference could not tell from something else."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.\-/]{0,99}", tag) or tag.startswith("latest"):
        raise UsageError(
            f"bad tag {tag!r}: use letters, digits, '_', '.', '-', '/' (and not 'latest...')"
        )
    if all(c in "0123456789abcdefABCDEF" for c in tag) and len(tag) >= 4:
        raise UsageError(f"bad tag {tag!r}: it could be mistaken for a checkpoint id")
