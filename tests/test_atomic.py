"""write_file_atomic: no predictable temp names, nothing followed, nothing left (issue 16.15)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from snapstore.errors import TreeIOError
from snapstore.tree import atomic
from snapstore.tree.atomic import write_file_atomic


def test_writes_the_bytes_with_the_umask_mode(tmp_path: Path):
    out = tmp_path / "out.json"
    old = os.umask(0o022)
    try:
        write_file_atomic(out, b"{}\n")
    finally:
        os.umask(old)
    assert out.read_bytes() == b"{}\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_planted_names_are_never_followed(tmp_path: Path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"victim's data\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    # Every name the old code could have used, planted as links to the victim.
    for pid in range(os.getpid() - 5, os.getpid() + 5):
        os.symlink(victim, shared / f"out.json.snapstore-tmp.{pid}")
    os.symlink(victim, shared / "out.json")  # even the target itself
    write_file_atomic(shared / "out.json", b"new\n")
    assert victim.read_bytes() == b"victim's data\n"
    assert not (shared / "out.json").is_symlink()
    assert (shared / "out.json").read_bytes() == b"new\n"


def test_a_name_taken_by_another_file_is_skipped(tmp_path: Path, monkeypatch):
    names = iter(["aaaa", "aaaa", "bbbb"])
    monkeypatch.setattr(atomic.secrets, "token_hex", lambda n: next(names))
    (tmp_path / ".out.snapstore-tmp.aaaa").write_bytes(b"someone else's\n")
    write_file_atomic(tmp_path / "out", b"mine\n")
    assert (tmp_path / ".out.snapstore-tmp.aaaa").read_bytes() == b"someone else's\n"
    assert (tmp_path / "out").read_bytes() == b"mine\n"


def test_failure_is_one_error_and_leaves_no_temp(tmp_path: Path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir/x").write_bytes(b"x")
    with pytest.raises(TreeIOError, match="cannot write"):
        write_file_atomic(tmp_path / "dir", b"data")  # a non-empty directory is in the way
    with pytest.raises(TreeIOError, match="cannot write"):
        write_file_atomic(tmp_path / "missing/out", b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]


def test_restore_temp_names_planted_in_the_tree_are_never_followed(tmp_path: Path):
    from snapstore.ops.restore.apply import TMP_PREFIX, Applier
    from snapstore.ops.restore.plan import Step
    from snapstore.records.manifest import FILE, Entry
    from snapstore.storage.objects import chunk_id, encode_chunk

    root = tmp_path / "tree"
    root.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"victim\n")
    for i in (1, 2):  # the applier's first names for tag "t"
        os.symlink(victim, root / os.fsdecode(TMP_PREFIX + b"t." + str(i).encode()))
    data = b"restored\n"
    chunks = {chunk_id(data): encode_chunk(data)}
    entry = Entry(b"f.txt", FILE, 0o100640, len(data), 0, chunk_id(data))
    applier = Applier(os.fsencode(root), lambda table, key: chunks.get(key) if table == "chunks" else None, {b"f.txt": entry}, "t")
    try:
        applier.apply(Step("write", b"f.txt"))
    finally:
        applier.close()
    assert victim.read_bytes() == b"victim\n"
    assert (root / "f.txt").read_bytes() == data
    assert stat.S_IMODE((root / "f.txt").stat().st_mode) == 0o640
