"""Restore never removes or replaces what it could not record (issue 16.2).

Unreadable is made real with chmod 000.  Root reads mode-000 files anyway, so when the tests run
as root each scenario runs in a forked child that has dropped to the ``nobody`` user (uid/gid
65534), on a tree that user owns: the scan then really gets EACCES.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from snapstore.store import Store

NOBODY = 65534


def _preload() -> None:
    import concurrent.futures.thread  # noqa: F401
    import ctypes  # noqa: F401
    import ctypes.util  # noqa: F401
    import importlib
    import pkgutil

    import snapstore

    for mod in pkgutil.walk_packages(snapstore.__path__, "snapstore."):
        if not mod.name.endswith(".__main__"):  # (running one is its import)
            importlib.import_module(mod.name)


def _as_unprivileged(fn: Callable[[Path], Any]) -> Any:
    """Run ``fn(root)`` where chmod 000 denies reading: as nobody in a child when we are root."""
    base = Path(tempfile.mkdtemp(prefix="snapstore-unreadable-"))
    root = base / "tree"
    try:
        if os.geteuid() != 0:
            root.mkdir()
            return fn(root)
        os.chown(base, NOBODY, NOBODY)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: drop privileges, run, send back the result or the failure
            os.close(read_end)
            try:
                _preload()  # the interpreter's files may not be readable by nobody
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                root.mkdir()
                out = ("ok", fn(root))
            except BaseException as exc:  # noqa: BLE001 - the parent re-raises it
                out = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            with os.fdopen(write_end, "wb") as f:
                pickle.dump(out, f)
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as f:
            data = f.read()
        os.waitpid(pid, 0)
        status, value = pickle.loads(data)
        if status != "ok":
            pytest.fail(value)
        return value
    finally:
        for p in base.rglob("*"):  # give back what the test locked, so it can be removed
            if p.is_dir() and not p.is_symlink():
                os.chmod(p, 0o755)
        shutil.rmtree(base)


def _file_scenario(root: Path) -> dict[str, Any]:
    (root / "a.txt").write_bytes(b"A\n")
    with Store.init(root) as store:
        store.snapshot("A", tags=["A"])
        (root / "a.txt").write_bytes(b"edited\n")
        (root / "secret.txt").write_bytes(b"only copy\n")
        os.chmod(root / "secret.txt", 0)
        report = store.restore("A")
        os.chmod(root / "secret.txt", 0o600)
        out = {
            "unrecorded": report.unrecorded,
            "partial": report.partial,
            "json": report.to_json()["unrecorded"],
            "secret": (root / "secret.txt").read_bytes(),
            "a": (root / "a.txt").read_bytes(),
        }
        store.undo()
        out["a_after_undo"] = (root / "a.txt").read_bytes()
        out["secret_after_undo"] = (root / "secret.txt").read_bytes()
        return out


def test_an_unreadable_file_is_left_in_place_and_reported(tmp_path: Path):
    out = _as_unprivileged(_file_scenario)
    assert out["secret"] == b"only copy\n"
    assert out["a"] == b"A\n"
    assert out["unrecorded"] == [b"secret.txt"] and out["partial"] is True
    assert out["json"] == ["secret.txt"]
    assert out["a_after_undo"] == b"edited\n"
    assert out["secret_after_undo"] == b"only copy\n"


def _dir_scenario(root: Path) -> dict[str, Any]:
    (root / "a.txt").write_bytes(b"A\n")
    (root / "d").mkdir()
    (root / "d/x.txt").write_bytes(b"x\n")
    with Store.init(root) as store:
        store.snapshot("A", tags=["A"])
        (root / "a.txt").write_bytes(b"edited\n")
        (root / "locked").mkdir()
        (root / "locked/inside.txt").write_bytes(b"mine\n")
        os.chmod(root / "locked", 0)
        (root / "d/x.txt").write_bytes(b"x edited\n")
        os.chmod(root / "d", 0)
        report = store.restore("A")
        os.chmod(root / "locked", 0o755)
        os.chmod(root / "d", 0o755)
        out = {
            "unrecorded": report.unrecorded,
            "a": (root / "a.txt").read_bytes(),
            "inside": (root / "locked/inside.txt").read_bytes(),
            "x": (root / "d/x.txt").read_bytes(),
        }
        store.undo()
        out["a_after_undo"] = (root / "a.txt").read_bytes()
        return out


def test_an_unreadable_directory_is_left_in_place_and_does_not_fail_the_restore(tmp_path: Path):
    out = _as_unprivileged(_dir_scenario)
    assert out["a"] == b"A\n"  # the rest of the restore happened
    assert out["unrecorded"] == [b"d", b"locked"]
    assert out["inside"] == b"mine\n"
    assert out["x"] == b"x edited\n"  # below an unreadable directory: left alone
    assert out["a_after_undo"] == b"edited\n"


def _replace_dir_scenario(root: Path) -> dict[str, Any]:
    (root / "gone").write_bytes(b"a file in A\n")
    with Store.init(root) as store:
        store.snapshot("A", tags=["A"])
        (root / "gone").unlink()
        (root / "gone/locked").mkdir(parents=True)
        (root / "gone/locked/keep.txt").write_bytes(b"mine\n")
        (root / "gone/other.txt").write_bytes(b"other\n")
        os.chmod(root / "gone/locked", 0)
        report = store.restore("A")
        os.chmod(root / "gone/locked", 0o755)
        return {
            "unrecorded": report.unrecorded,
            "is_dir": (root / "gone").is_dir(),
            "keep": (root / "gone/locked/keep.txt").read_bytes(),
        }


def test_a_directory_holding_an_unreadable_one_is_not_replaced(tmp_path: Path):
    """The target puts a file where the tree has a directory that holds an unreadable one: the
    directory stays (with what could not be recorded), the restore does not fail."""
    out = _as_unprivileged(_replace_dir_scenario)
    assert out["unrecorded"] == [b"gone/locked"]
    assert out["is_dir"] is True
    assert out["keep"] == b"mine\n"
