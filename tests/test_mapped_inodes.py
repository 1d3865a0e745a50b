"""Files mapped shared and writable by other programs on the tree's device (issue 40, the
1M-file rows): each new such inode made every watched checkpoint scan every record of the
tree (1.3 s over 4 checkpoints at 200,000 files while other stores were open on the machine).
An inode the tree's files do not have is now answered from a sorted index of their inodes,
scanning nothing; one a file of the tree has is still found by its paths."""

from __future__ import annotations

from types import SimpleNamespace

from snapstore.ops.snapshot import incremental
from snapstore.records.manifest import FILE
from snapstore.tree import scan


class CountingDict(dict):  # type: ignore[type-arg]
    """A found dict that counts the passes over its records."""

    passes = 0

    def values(self):  # type: ignore[no-untyped-def, override]
        CountingDict.passes += 1
        return super().values()


def found_of(n: int) -> CountingDict:
    out = CountingDict()
    for i in range(n):
        path = f"d/f{i:05d}".encode()
        out[path] = scan.Found(path, FILE, scan.Stat(0o100644, 1000 + i, 10, 1, 1))
    return out


def test_foreign_mapped_inodes_scan_no_record_and_the_trees_are_still_found():
    found = found_of(20_000)
    watcher = SimpleNamespace(inode_memo={}, inode_index=None, inode_recent=set())
    first = incremental._by_inode(watcher.inode_memo, found, incremental._in_tree(watcher, found, {5, 6}))  # type: ignore[arg-type]
    assert first == set() and CountingDict.passes == 1  # (the index is built once)
    for k in range(50):  # new programs' databases, one checkpoint after another
        got = incremental._by_inode(watcher.inode_memo, found, incremental._in_tree(watcher, found, {10**9 + k}))  # type: ignore[arg-type]
        assert got == set()
    assert CountingDict.passes == 1  # no record scanned for a foreign inode
    mine = incremental._by_inode(watcher.inode_memo, found, incremental._in_tree(watcher, found, {1000 + 77}))  # type: ignore[arg-type]
    assert mine == {b"d/f00077"}
    watcher.inode_recent.add(777_777)  # (a file found since the index was built)
    found[b"d/new"] = scan.Found(b"d/new", FILE, scan.Stat(0o100644, 777_777, 1, 1, 1))
    assert incremental._by_inode(watcher.inode_memo, found, incremental._in_tree(watcher, found, {777_777})) == {b"d/new"}  # type: ignore[arg-type]
