"""What a pipeline stage is given: the narrow context, not the Store.

A stage (snapshot, restore, diff, gc, verify, ...) needs the backend, the tree's root, the paths
it must never touch and the compression level.  The snapshot stage also keeps state across the
calls of one Store, in typed slots here: the manifest memo (:class:`ManifestMemo`) and, when a
watcher runs, the tree state (:class:`TreeState`) its next snapshot patches instead of walking.
The Store builds one :class:`StageContext` and hands it to every stage, so a stage cannot reach
into the facade's private members and a test can build one without a Store.

The state types live here, not in the snapshot package, so the context (which every stage
imports) depends on nothing above it: the snapshot, restore and facade modules all meet here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING

from snapstore.storage.backend import Backend

if TYPE_CHECKING:
    from snapstore.ops.snapshot.ordered import Ordered
    from snapstore.records.conversation import Memo
    from snapstore.records.manifest import Entry
    from snapstore.records.manifest_codec import Codec
    from snapstore.records.requests import Request
    from snapstore.tree.scan import Found, Listings
    from snapstore.tree.watcher import Watcher

#: The newest ``log`` and ``oplog`` keys: what tells a context that nobody else wrote.
Keys = tuple[bytes | None, bytes | None]


class TreeState:
    """What a watching context knows of the tree since its last committed snapshot."""

    # (Plain classes here: every CLI process imports this module, and creating a NamedTuple
    # class, or importing dataclasses, would slow its start.)
    __slots__ = ("found", "cache", "entries", "keys", "listings", "links", "carried")

    def __init__(
        self,
        found: MutableMapping[bytes, Found],
        cache: dict[bytes, bytes],
        entries: dict[bytes, Entry],
        keys: Keys,
        listings: Listings,
        links: set[bytes] | None = None,
    ) -> None:
        #: What the walk found, patched since (a tree.packed.FoundMap: one packed value a file).
        self.found = found
        #: Stat-cache values set since that snapshot (a restore's), not yet read back from the
        #: table: the table itself is read for the paths a snapshot examines, never held whole.
        self.cache = cache
        #: The entries of the tree as of that snapshot (whoever changes one copies the dict:
        #: it is also the manifest memo's).
        self.entries = entries
        #: The newest ``log`` and ``oplog`` keys right after that snapshot.
        self.keys = keys
        #: Each walked directory's listing (what :mod:`snapstore.tree.rescan` patches).
        self.listings = listings
        #: The files found with more than one hard link: re-stat'ed at every snapshot, since a
        #: write through another link (in the tree or outside it) gives no event naming them.
        self.links: set[bytes] = set() if links is None else links
        #: Set when a restore patched ``entries`` between snapshots (ops.restore.watching):
        #: the dict they were copied from (the manifest memo's) and the paths set since, so
        #: the next snapshot still edits the kept order and re-cuts the manifest at those
        #: paths only, instead of sorting and comparing every entry.
        self.carried: tuple[dict[bytes, Entry], set[bytes]] | None = None


class ManifestMemo:
    """The last manifest this context committed (or reused), kept across snapshots of one Store:
    an unchanged tree is recognised by one dict comparison, a changed one re-encodes only the
    manifest chunks that changed (``codec``)."""

    __slots__ = ("entries", "mid", "codec", "ordered")

    def __init__(self) -> None:
        #: The entries of manifest ``mid`` (the dict itself, which is also the watcher state's: a
        #: patch edits it in place, and a snapshot that does not finish drops the memo).
        self.entries: dict[bytes, Entry] | None = None
        #: Those entries in path order, with their totals (ops.snapshot.ordered.Ordered).
        self.ordered: Ordered | None = None
        self.mid: bytes | None = None
        self.codec: Codec | None = None


class StageContext:
    """The backend, the tree and the settings a stage works with."""

    # (A plain class, not a dataclass: importing dataclasses would slow every CLI process's start.)
    __slots__ = (
        "backend", "root", "excluded", "level", "store_dir", "delta_depth",
        "manifest_memo", "watcher", "tree_state", "walk_check", "request", "found_hint", "after_answer",
        "conversation_memos",
    )  # fmt: skip

    def __init__(
        self,
        backend: Backend,
        root: str,
        excluded: frozenset[bytes] = frozenset(),
        level: int = 3,
        store_dir: str | None = None,
        delta_depth: int = 10,
    ) -> None:
        self.backend = backend
        #: Absolute path of the working tree.
        self.root = root
        #: Tree-relative paths (``/``-separated bytes) never read or written (the store).
        self.excluded = excluded
        #: zstd level for new chunks.
        self.level = level
        #: The store directory, or None for an in-memory store.
        self.store_dir = store_dir
        #: Longest delta chain for new chunks (format 2; 0 turns deltas off).
        self.delta_depth = delta_depth
        #: The last manifest a snapshot of this context wrote (ops.snapshot.encode).
        self.manifest_memo = ManifestMemo()
        #: The inotify watcher (``Store.watch``), or None: then every snapshot walks.
        self.watcher: Watcher | None = None
        #: With a watcher: the tree as of the last snapshot (ops.snapshot.incremental).
        self.tree_state: TreeState | None = None
        #: The found records a periodic check's full walk must agree with (set by the patch
        #: that preceded it, taken by that walk).
        self.walk_check: MutableMapping[bytes, Found] | None = None
        #: The service request this work is done for (its id goes into the transaction of the
        #: effect: records.requests); None outside the service.
        self.request: Request | None = None
        #: The last conversation written per task (records.conversation.Memo), for the few
        #: most recent tasks: a conversation that grows costs only its new messages.
        self.conversation_memos: dict[str | None, Memo] = {}
        #: What a walk would find right after a restore (ops.restore.after), for the record
        #: of the tree it left: (the oplog key of that restore, the records, the paths whose
        #: records may differ from the safety checkpoint's walk with their records now, that
        #: checkpoint's manifest id).  Used once, only while nothing else was recorded since;
        #: cleared by whoever set it.
        self.found_hint: tuple[bytes, list[Found], dict[bytes, Found | None], bytes] | None = None
        #: Inside a service request: work the command leaves for after its answer (the service
        #: runs each in turn once the exit code is out, before it takes the next request);
        #: None elsewhere (the work is done before the command returns).
        self.after_answer: list[Callable[[], None]] | None = None

    @property
    def root_bytes(self) -> bytes:
        return os.fsencode(self.root)

    def read_stored(self, entry: Entry) -> bytes:
        """The content of ``entry`` as the store holds it."""
        from snapstore.storage import objects

        with self.backend.read() as view:
            return objects.read_stream(view.get, entry.ref)

    def read_disk(self, entry: Entry) -> bytes:
        """The content of ``entry``'s path in the tree now (a symlink there is not followed)."""
        fd = os.open(os.path.join(self.root_bytes, entry.path), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            return f.read()
