"""Permission bits: recorded exactly, shown by diff, restored exactly (issue 10.10, 16.17)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from restore_helpers import plant_checkpoint

from snapstore.ops.diff import MODIFIED
from snapstore.records.manifest import DIR, FILE, Entry, exact_mode
from snapstore.storage.objects import chunk_id
from snapstore.store import Store
from snapstore.tree import scan


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def _tree(root: Path) -> None:
    root.mkdir()
    for name, mode in (("a744.sh", 0o744), ("b600.txt", 0o600), ("c640.txt", 0o640), ("d755", 0o755)):
        (root / name).write_bytes(name.encode() + b"\n")
        os.chmod(root / name, mode)
    (root / "private").mkdir()
    os.chmod(root / "private", 0o700)


def test_modes_are_recorded_with_their_file_type(tmp_path: Path):
    root = tmp_path / "t"
    _tree(root)
    with Store.init(root) as store:
        store.snapshot("A", tags=["A"])
        modes = {e.path: e.mode for e in store.entries("latest")}
    assert modes == {
        b"a744.sh": 0o100744,
        b"b600.txt": 0o100600,
        b"c640.txt": 0o100640,
        b"d755": 0o100755,
        b"private": 0o040700,
    }


def test_0744_comes_back_0744_and_every_mode_is_restored(tmp_path: Path):
    root = tmp_path / "t"
    _tree(root)
    with Store.init(root) as store:
        store.snapshot("A", tags=["A"])
        expected = {p.name: _mode(p) for p in root.iterdir() if p.name != ".snapstore"}
        for p in root.iterdir():
            if p.name != ".snapstore":
                os.chmod(p, 0o755 if p.is_dir() else 0o644)
        store.restore("A")
        assert {p.name: _mode(p) for p in root.iterdir() if p.name != ".snapstore"} == expected
        assert _mode(root / "a744.sh") == 0o744


def test_chmod_600_to_644_is_a_visible_change_restored_both_ways(tmp_path: Path):
    root = tmp_path / "t"
    root.mkdir()
    (root / "secret.txt").write_bytes(b"s\n")
    os.chmod(root / "secret.txt", 0o600)
    with Store.init(root) as store:
        store.snapshot("A", tags=["A"])
        os.chmod(root / "secret.txt", 0o644)
        changes = store.diff("A")
        assert [(c.status, c.path, c.description) for c in changes] == [
            (MODIFIED, b"secret.txt", "mode 100600 -> 100644")
        ]
        assert changes[0].to_json()["description"] == "mode 100600 -> 100644"
        store.snapshot("B", tags=["B"])
        assert [c.description for c in store.diff("A", "B")] == ["mode 100600 -> 100644"]
        report = store.restore("A")
        assert [c.path for c in report.changes] == [b"secret.txt"]
        assert _mode(root / "secret.txt") == 0o600
        assert (root / "secret.txt").read_bytes() == b"s\n"
        store.undo()
        assert _mode(root / "secret.txt") == 0o644
        store.restore("A")
        assert _mode(root / "secret.txt") == 0o600
        assert store.diff("A") == []


def test_empty_directory_mode_is_restored_through_its_fd(tmp_path: Path):
    root = tmp_path / "t"
    root.mkdir()
    (root / "box").mkdir()
    os.chmod(root / "box", 0o711)
    with Store.init(root) as store:
        store.snapshot("A", tags=["A"])
        os.chmod(root / "box", 0o755)
        assert [c.description for c in store.diff("A")] == ["mode 40711 -> 40755"]
        store.restore("A")
        assert _mode(root / "box") == 0o711
        os.rmdir(root / "box")
        store.restore("A")
        assert _mode(root / "box") == 0o711


def test_a_hard_link_to_a_file_outside_the_tree_keeps_its_mode(tmp_path: Path):
    root = tmp_path / "t"
    root.mkdir()
    outside = tmp_path / "outside.txt"
    (root / "shared.txt").write_bytes(b"same bytes\n")
    os.chmod(root / "shared.txt", 0o600)
    with Store.init(root) as store:
        store.snapshot("A", tags=["A"])
        # The file is replaced by a hard link to a file outside the tree, same bytes, mode 644.
        outside.write_bytes(b"same bytes\n")
        os.chmod(outside, 0o644)
        os.unlink(root / "shared.txt")
        os.link(outside, root / "shared.txt")
        store.restore("A")
        assert _mode(root / "shared.txt") == 0o600
        assert _mode(outside) == 0o644  # the restore wrote a new inode, never chmodded this one
        assert outside.read_bytes() == b"same bytes\n"
        assert os.lstat(root / "shared.txt").st_ino != os.lstat(outside).st_ino


def test_setuid_setgid_sticky_are_dropped_and_counted(tmp_path: Path):
    root = tmp_path / "t"
    root.mkdir()
    (root / "tool").write_bytes(b"#!/bin/sh\n")
    os.chmod(root / "tool", 0o4755)
    (root / "shared").mkdir()
    os.chmod(root / "shared", 0o1777)
    report = scan.ScanReport()
    scan.walk(os.fsencode(root), frozenset(), report)
    assert report.mode_bits_dropped == 2
    with Store.init(root) as store:
        store.snapshot("A", tags=["A"])
        modes = {e.path: e.mode for e in store.entries("latest")}
        assert modes == {b"shared": 0o041777 & ~0o7000, b"tool": 0o100755}
        os.chmod(root / "tool", 0o644)
        store.restore("A")
        assert _mode(root / "tool") == 0o755  # never setuid again


def test_old_manifests_keep_their_informational_modes(tmp_path: Path):
    """An entry without file type bits (written before exact modes) restores as it did then:
    a permission-only difference is not a change, and only the exec bit is applied."""
    root = tmp_path / "t"
    root.mkdir()
    (root / "f.txt").write_bytes(b"pwned\n")
    os.chmod(root / "f.txt", 0o600)
    assert exact_mode(0o644) is None and exact_mode(0o100644) == 0o644
    with Store.init(root) as store:
        store.snapshot("now")
        old = plant_checkpoint(
            store,
            [Entry(b"f.txt", FILE, 0o644, 6, 0, chunk_id(b"pwned\n")), Entry(b"d", DIR, 0o700, 0, 0, b"")],
        )
        assert [c.path for c in store.diff(old)] == [b"d"]  # the empty dir is new; f.txt is not
        store.restore(old)
        assert _mode(root / "f.txt") == 0o600  # untouched: not a change under the old rule
        assert (root / "d").is_dir() and _mode(root / "d") == 0o755  # as before: not applied


def test_modes_the_umask_would_take_are_restored_exactly(tmp_path: Path):
    """A restored file is created with its mode: what the umask takes away is put back."""
    root = tmp_path / "t"
    root.mkdir()
    wanted = {"g664.txt": 0o664, "w666.txt": 0o666, "x775.sh": 0o775, "p644.txt": 0o644, "r444.txt": 0o444}
    for name, mode in wanted.items():
        (root / name).write_bytes(name.encode())
        os.chmod(root / name, mode)
    old = os.umask(0o077)
    try:
        with Store.init(root) as store:
            store.snapshot("A", tags=["A"])
            for name in wanted:  # (each replaced: the restore writes every one)
                (root / name).unlink()
                (root / name).write_bytes(b"changed")
            store.restore("A")
            assert {name: _mode(root / name) for name in wanted} == wanted
            assert (root / "r444.txt").read_bytes() == b"r444.txt"
    finally:
        os.umask(old)


def test_no_temp_file_is_writable_by_group_or_others_while_its_bytes_go_in(tmp_path: Path, monkeypatch):
    """Under a umask of 000, a file whose mode lets group and others write it: while the restore
    writes its temp file, nobody else may (a write of theirs landing then would be tied to the
    checkpoint's content in the stat cache); it gets its mode once its bytes are in."""
    from snapstore.ops.restore import apply

    root = tmp_path / "t"
    root.mkdir()
    (root / "shared.txt").write_bytes(b"A" * 1000)
    os.chmod(root / "shared.txt", 0o666)
    modes: list[int] = []
    real = apply.write

    def write(fd: int, data: memoryview) -> int:
        modes.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return real(fd, data)

    old = os.umask(0)
    try:
        with Store.init(root) as store:
            store.snapshot("A", tags=["A"])
            (root / "shared.txt").unlink()
            (root / "shared.txt").write_bytes(b"changed")
            monkeypatch.setattr(apply, "write", write)
            store.restore("A")
    finally:
        os.umask(old)
    assert modes and all(m & 0o022 == 0 for m in modes), [oct(m) for m in modes]
    assert _mode(root / "shared.txt") == 0o666
