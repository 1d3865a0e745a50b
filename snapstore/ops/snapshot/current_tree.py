"""The working tree's entries now, from a watcher's kept state, without a walk and without
consuming anything: what ``diff`` against the tree, a dry-run restore, a restore's check of the
tree and a revert ask.

A watching Store (:mod:`.incremental`) keeps the state its last snapshot left; the pending
events (``Watcher.peek``) are applied to an overlay and copies of it (:func:`.incremental.patch`), the
files they name and the stat cache cannot vouch for are hashed (never stored), and the answer
is thrown away: the next snapshot still sees every event.  When the state cannot vouch (no
watcher, another writer committed since, an overflow), the callers walk the tree
(:func:`snapstore.tree.worktree.current_state`).
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping

from snapstore.ops.context import StageContext
from snapstore.ops.snapshot import incremental
from snapstore.records.manifest import Entry
from snapstore.storage.backend import ReadView
from snapstore.tree import scan, worktree
from snapstore.tree.packed import FoundOverlay


def current_state(ctx: StageContext) -> tuple[dict[bytes, Entry], dict[bytes, scan.Found]] | None:
    """:func:`snapstore.tree.worktree.current_state` from the watcher's state, without a walk
    (None when it cannot vouch: then the caller walks).

    Nothing is committed and nothing is consumed: the state is patched on copies and the
    watcher's pending changes stay pending, for the next snapshot.
    """
    looked = _look(ctx)
    return None if looked is None else (looked[0], dict(looked[1].items()))


def worktree_difference(
    ctx: StageContext,
    manifest_id: bytes,
    against: Callable[[dict[bytes, Entry]], tuple[dict[bytes, Entry], dict[bytes, Entry]]],
) -> tuple[dict[bytes, Entry], dict[bytes, Entry]] | None:
    """``(old, new)`` entries to compare manifest ``manifest_id`` with the working tree, from
    the watcher's state (None when it cannot vouch: then the caller walks).

    When that manifest is the one this context last wrote and its entries are the state's, only
    the paths the pending changes touched can differ: both sides hold just those (comparing
    them gives every change), so neither the manifest is decoded nor the whole tree compared.
    Otherwise ``against(the tree's entries)`` compares them with the manifest.
    """
    looked = _look(ctx)
    if looked is None:
        return None
    entries, _, touched, base = looked
    memo = ctx.manifest_memo
    if memo.mid != manifest_id or memo.entries is not base:
        return against(entries)
    old = {p: base[p] for p in touched if p in base}
    new = {p: entries[p] for p in touched if p in entries}
    return old, new


def difference(
    ctx: StageContext, view: ReadView, manifest_id: bytes
) -> tuple[dict[bytes, Entry], dict[bytes, Entry]]:
    """``(old, new)`` entries to compare manifest ``manifest_id`` with the working tree: from
    the watcher's state when it vouches (:func:`worktree_difference`), else by a walk."""
    from snapstore.ops.diff import difference_from_tree

    def against(tree: dict[bytes, Entry]) -> tuple[dict[bytes, Entry], dict[bytes, Entry]]:
        return difference_from_tree(view.get, manifest_id, tree)

    got = worktree_difference(ctx, manifest_id, against)
    return got if got is not None else against(worktree.current_state(ctx)[0])


def _look(
    ctx: StageContext,
) -> tuple[dict[bytes, Entry], MutableMapping[bytes, scan.Found], set[bytes], dict[bytes, Entry]] | None:
    """The tree's entries and found records now, the paths that may differ from the state's
    entries, and those entries; None when the state cannot vouch."""
    watcher = ctx.watcher
    state = ctx.tree_state
    if watcher is None or state is None:
        return None
    with ctx.backend.read() as view:
        last_item = next(iter(view.items("log", reverse=True)), None)
        last_op = next(iter(view.items("oplog", reverse=True)), None)
    if state.keys != (last_item[0] if last_item else None, last_op[0] if last_op else None):
        return None
    scanned = incremental.scanned_now(watcher, state.found)  # (before the events: as a snapshot's)
    changes = watcher.peek()
    if changes.full:
        return None
    mapped = incremental.blind_spots(watcher, state, changes, look=True, scanned=scanned)
    found = FoundOverlay(state.found)  # (the state's records, untouched: no copy of them)
    report = scan.ScanReport()
    # No watch is added: a read-only look must not change what is watched (the next
    # snapshot's patch adds it).
    patched = incremental.patch(ctx, state, found, dict(state.listings), changes, report, None, mapped)
    if patched is None:
        return None
    entries = patched.entries
    worktree.hash_misses(ctx.root_bytes, patched.to_read, entries, report)
    watcher.looks += 1
    return entries, found, patched.touched, patched.base
