"""The first checkpoints of a watching Store (the resident service, an agent's process), counted.

Opening a watching Store costs one walk, on its first checkpoint: every file is looked at then.
The checkpoint after it, the agent's first ordinary tool call, must already be O(changed): the
manifest codec is filled by that walking checkpoint (its work per file is paid there, once),
so a 1-file change then encodes a chunk or two of the manifest's entries and does not read the
stored manifest back (its leaves' ids, or its entries; the one leaf a new leaf is a delta on is
manifest_deltas' business).  Counted, not timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from snapstore.ops.snapshot import encode
from snapstore.ops.snapshot.walk import PACK_ENTRIES_FROM
from snapstore.records import manifest, manifest_codec
from snapstore.storage import objects
from snapstore.store import Store
from snapstore.testing import build_tree

#: Entries a 1-file checkpoint may encode: the chunks around the change (32 records a chunk
#: on average, cut by key), far below one a file.
ENCODED_MAX = 400


class _Counts:
    def __init__(self) -> None:
        self.packed = 0
        self.leaves_read = 0


def _counting(monkeypatch: pytest.MonkeyPatch) -> _Counts:
    """Count every manifest entry encoded (the codec's and the whole encoding's packers, the
    fingerprint's entries) and every read of a stored manifest's leaves."""
    counts = _Counts()

    def packer() -> Callable[[manifest.Entry], bytes]:
        real = real_packer()

        def pack(e: manifest.Entry) -> bytes:
            counts.packed += 1
            return real(e)

        return pack

    real_packer = manifest.packer
    monkeypatch.setattr(manifest, "packer", packer)
    monkeypatch.setattr(manifest_codec, "packer", packer)
    real_fingerprint = encode._fingerprint

    def fingerprint(ordered: Any) -> bytes:
        counts.packed += len(ordered)
        return real_fingerprint(ordered)

    monkeypatch.setattr(encode, "_fingerprint", fingerprint)
    real_leaves = objects.leaf_ids

    def leaf_ids(*args: Any, **kwargs: Any) -> list[bytes]:
        counts.leaves_read += 1
        return real_leaves(*args, **kwargs)

    monkeypatch.setattr(objects, "leaf_ids", leaf_ids)
    real_iter = objects.iter_stream

    def iter_stream(*args: Any, **kwargs: Any) -> Any:
        counts.leaves_read += 1
        return real_iter(*args, **kwargs)

    monkeypatch.setattr(objects, "iter_stream", iter_stream)
    return counts


@pytest.mark.parametrize("files", [3_000, PACK_ENTRIES_FROM + 1_000])  # plain entries, packed entries
def test_the_first_checkpoint_after_the_walk_is_o_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: int):
    root = tmp_path / "t"
    build_tree(root, {f"d{i // 500:03d}/f{i:06d}.txt": b"%d\n" % i for i in range(files)})
    with Store.init(root) as cli:  # the last record made by another process (the CLI)
        cli.snapshot("initial")
    (root / "d000" / "f000001.txt").write_bytes(b"changed while no Store was open\n")
    counts = _counting(monkeypatch)
    with Store.open(root, watch=True) as s:
        first = s.snapshot("the walk")
        walked = counts.packed
        assert walked >= files  # (the walk's checkpoint: every entry, once)
        for k, name in enumerate(["d001/f000600.txt", "d003/f001700.txt", "d000/f000002.txt"]):
            (root / name).write_bytes(b"edit %d\n" % k)
            time.sleep(0.05)
            counts.packed = counts.leaves_read = 0
            cp = s.snapshot(f"one file {k}")
            assert counts.packed <= ENCODED_MAX, (k, counts.packed)  # not one a file (was `files` for k == 0)
            assert counts.leaves_read == 0, k  # the stored manifest is not read back (was 1 for k == 0)
            assert s.read_bytes(cp.id, name) == b"edit %d\n" % k
        assert s.watch_status()["walks"] == 1
        assert s.read_bytes(first.id, "d000/f000001.txt") == b"changed while no Store was open\n"
        # The same manifests a store without any memo computes.
        ids = [c.manifest for c in s.checkpoints()]
    with Store.open(root) as fresh:
        again = fresh.snapshot("fresh", skip_unchanged=True)
        assert again.manifest == ids[0]
        assert fresh.verify().ok


class _CountingList(list):  # type: ignore[type-arg]
    """A list of the codec's (or its index's) counting what is read of it: items read one at
    a time, and items read by slices or passes."""

    def __init__(self, items: list[Any]) -> None:
        super().__init__(list.__iter__(items))
        self.items_read = 0
        self.sliced = 0

    def __getitem__(self, i: Any) -> Any:
        got = super().__getitem__(i)
        if isinstance(i, slice):
            self.sliced += len(got)
        else:
            self.items_read += 1
        return got

    def __iter__(self) -> Any:
        self.sliced += len(self)
        return super().__iter__()


def _counted(codec: manifest_codec.Codec) -> list[_CountingList]:
    """Put counting lists in place of the codec's chunk lists and its index levels' lists."""
    out = []
    for name in ("ends", "chunks", "cids", "leaves"):
        counting = _CountingList(getattr(codec, name))
        setattr(codec, name, counting)
        out.append(counting)
    for level in codec.index.levels:
        for name in ("ends", "parents", "plains"):
            counting = _CountingList(getattr(level, name))
            setattr(level, name, counting)
            out.append(counting)
    return out


#: List items a 1-file checkpoint may read by slices of one of the codec's lists: the chunks
#: re-cut and, in the index, the nodes re-cut (up to index_tree.NODE_MAX refs each) on each level.
SLICED_MAX = 200


def test_a_one_file_checkpoint_edits_the_codec_where_it_changed(tmp_path: Path):
    """The codec keeps a list item a manifest chunk (~30,000 at a million files) and its index a
    few more: a 1-file checkpoint edits them where they change, it does not copy them (a copy
    touches every chunk's objects at each checkpoint, and its time then depends on what of the
    service's memory the machine keeps warm)."""
    files = PACK_ENTRIES_FROM + 10_000
    root = tmp_path / "t"
    build_tree(root, {f"d{i // 500:03d}/f{i:06d}.txt": b"%d\n" % i for i in range(files)})
    Store.init(root).close()
    names = ("ends", "chunks", "cids", "leaves")
    steps = [
        ("edit", "d001/f000600.txt"),
        ("edit", "d030/f015001.txt"),
        ("add", "d020/new.txt"),  # (the chunks after it: their ends move by one)
        ("remove", "d040/f020017.txt"),
    ]
    with Store.open(root, watch=True) as s:
        s.snapshot("the walk")
        codec = s.context.manifest_memo.codec
        assert codec is not None and len(codec.cids) >= 4 * SLICED_MAX  # (a copy would show)
        for k, (how, name) in enumerate(steps):
            if how == "remove":
                (root / name).unlink()
            else:
                (root / name).write_bytes(b"edit %d, a longer record\n" % k)
            time.sleep(0.05)
            lists = _counted(codec)
            cp = s.snapshot(f"one file {k}")
            assert s.context.manifest_memo.codec is codec
            assert all(getattr(codec, n) is lists[i] for i, n in enumerate(names)), k  # edited, not replaced
            assert max(c.sliced for c in lists[:4]) <= SLICED_MAX, (k, [c.sliced for c in lists])  # not every chunk
            # The index's levels (a node a ~16 chunks): edited in place, no slice read of where
            # the nodes end or of their bytes (their ids are the next level's refs: a re-cut
            # node reads up to 64 of them).
            index = [c for i, c in enumerate(lists[4:]) if i % 3 != 1]
            assert sum(c.sliced for c in index) == 0, (k, [c.sliced for c in lists])
            if how != "remove":
                assert s.read_bytes(cp.id, name) == b"edit %d, a longer record\n" % k
        assert s.watch_status()["walks"] == 1
    with Store.open(root) as fresh:  # the same manifest as a store without a codec
        assert fresh.snapshot("fresh", skip_unchanged=True).manifest == cp.manifest


def _collector_visits() -> int:
    """What a full collection of the cyclic collector visits: every item of every object it
    tracks (the service's idle sweep, ops.service: ``gc.collect`` after each idle second)."""
    import gc

    gc.collect()
    return sum(len(gc.get_referents(o)) for o in gc.get_objects())


#: Items a full collection visits a file of a watching Store's kept state: the entries map's
#: keys and values (a dict subclass, always tracked), a little for the codec and the listings.
#: The ordered entries' chunks were lists (two more items a file, ~60 ms of the sweep at a
#: million files); as tuples of bytes the collector stops visiting them after one pass.
VISITS_PER_FILE = 3.5


def test_the_idle_sweep_visits_few_items_a_file(tmp_path: Path):
    files = PACK_ENTRIES_FROM + 10_000
    root = tmp_path / "t"
    build_tree(root, {f"d{i // 500:03d}/f{i:06d}.txt": b"%d\n" % i for i in range(files)})
    Store.init(root).close()
    base = _collector_visits()
    with Store.open(root, watch=True) as s:
        s.snapshot("the walk")
        for k in range(3):
            (root / "d001" / "f000600.txt").write_bytes(b"edit %d\n" % k)
            (root / "d020" / f"new{k}.txt").write_bytes(b"new\n")
            time.sleep(0.05)
            s.snapshot(f"edit {k}")
        per_file = (_collector_visits() - base) / files
        assert per_file <= VISITS_PER_FILE, per_file
