"""Watch vs walk through the portable watcher: every checkpoint taken through a Store watching
with the polling event source (snapstore.platform.polling, what macOS, the BSDs and
``SNAPSTORE_PLATFORM=portable`` get) equals a full walk of the same tree (issue 43 req 2).

The edits are those of the inotify category (tests/torture/test_torture_watch.py: creations,
rewrites, same-size rewrites with the mtime set back, renames of files and directories, hard
links from in and out of the tree, writes through live shared mappings, chmod, symlinks, a file
swapped for a directory, bursts), run with the Linux facilities masked, so neither inotify nor
``/proc`` helps.  Each checkpoint is compared with a full walk by a Store that does not watch
(``diff``) and byte for byte with the tree on disk, except for the files mapped shared and
writable at that moment: a write through a mapping that leaves the file's mtime and size as they
were is seen by neither a walk nor the polling source (the weaker guarantee without ``/proc``,
docs/reliability.md); those are counted (``mapped_unseen``), not hidden.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from test_torture_watch import STEPS, Run, Tree
from torture_tally import scaled

from snapstore.platform import SWITCH
from snapstore.store import Store

CATEGORY = "watch vs walk (portable polling watcher)"
SEEDS = scaled(1, int(os.environ.get("SNAPSTORE_WATCH_SEEDS", "4")))


class PortableRun(Run):
    def __init__(self, tree: Tree) -> None:
        super().__init__(tree)
        self.figures["mapped_unseen"] = 0

    def differences(self, cp_id: str) -> tuple[list[str], list[tuple[str, bytes]]]:
        assert self.watched is not None
        status = self.watched.watch_status() or {}
        assert status.get("events_from") == "polling", status
        every, walked = super().differences(cp_id)
        mapped = _mapped_names(self.tree)
        on_disk = [d for d in every if not d.startswith(mapped)] if mapped else every
        self.figures["mapped_unseen"] += len(every) - len(on_disk)
        return on_disk, walked


def _mapped_names(tree: Tree) -> tuple[str, ...]:
    """How diff_trees names the files mapped now, by any of their links (``'path': ...``)."""
    inodes = {os.fstat(fd).st_ino for fd, _ in tree.maps}
    if not inodes:
        return ()
    names: list[str] = []
    for f in tree.files():
        if f.lstat().st_ino in inodes:
            rel = f.relative_to(tree.root).as_posix()
            names += [f"{rel!r}: ", f"{os.fsencode(rel)!r}: "]
    return tuple(names)


@pytest.mark.parametrize("seed", range(SEEDS))
def test_checkpoints_through_the_polling_watcher_equal_full_walks(tmp_path: Path, seed: int, monkeypatch):
    monkeypatch.setenv(SWITCH, "portable")
    tree = Tree(tmp_path, random.Random(1000 + seed))
    Store.init(tree.root).close()
    run = PortableRun(tree)
    try:
        run.reopen()
        for i in range(STEPS):
            run.step("polling", burst=i % 10 == 9)
    finally:
        run.close()
    f = run.report(CATEGORY, f"watch vs walk (polling), seed {seed}")
    assert f["patched"] > f["walks"]  # the checkpoints went through the events, not full walks
