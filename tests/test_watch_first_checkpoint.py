"""The first checkpoints of a watching Store (the resident service, an agent's process), counted.

Opening a watching Store costs one walk, on its first checkpoint: every file is looked at then.
The checkpoint after it, the agent's first ordinary tool call, must already be O(changed): the
manifest codec is filled by that walking checkpoint (its work per file is paid there, once),
so a 1-file change then encodes a chunk or two of the manifest's entries and decodes no leaf of
the stored manifest.  Counted, not timed.
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
            assert counts.leaves_read == 0, k  # the stored manifest is not read back
            assert s.read_bytes(cp.id, name) == b"edit %d\n" % k
        assert s.watch_status()["walks"] == 1
        assert s.read_bytes(first.id, "d000/f000001.txt") == b"changed while no Store was open\n"
        # The same manifests a store without any memo computes.
        ids = [c.manifest for c in s.checkpoints()]
    with Store.open(root) as fresh:
        again = fresh.snapshot("fresh", skip_unchanged=True)
        assert again.manifest == ids[0]
        assert fresh.verify().ok
