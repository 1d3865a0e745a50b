"""The files a service's restore replaces are unlinked after its answer.

In a watching Store whose restore leaves its tree syncs for later (ops/restore/settle.py) and
that has work for after the answer (the service: ``Store.after_answer``), the files the restore
replaces are set aside (renamed to temp names) before the answer and unlinked after
it; the journal's applied mark names them until then (a SIGKILL in between:
tests/test_restore_after_answer.py).  Their deletions are kept out of the watcher's changes, so
the next checkpoint lists nothing again for them.  A Store with no work for after the answer (a
library loop, a CLI process) unlinks them before it returns, as before; the files a restore
deletes are unlinked before the answer in every case (their directory may be removed next).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from platform_marks import needs_inotify, needs_syncfs

from snapstore.errors import CorruptError
from snapstore.ops.restore import journal
from snapstore.ops.restore.journal import TMP_PREFIX
from snapstore.ops.restore.plan import Step
from snapstore.store import Store
from snapstore.testing import build_tree, read_tree


def _set_aside(root: Path) -> list[bytes]:
    return sorted(p for p in read_tree(root) if p.rpartition(b"/")[2].startswith(TMP_PREFIX))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    build_tree(root, {**{f"d{i % 3}/f{i}.txt": b"one %d\n" % i for i in range(12)}, "gone.txt": b"x\n"})
    with Store.init(root) as s:
        s.snapshot("first")
        for i in range(12):
            (root / f"d{i % 3}" / f"f{i}.txt").write_bytes(b"two %d\n" % i)
        (root / "gone.txt").unlink()
        (root / "added.txt").write_bytes(b"added\n")
        (root / "newdir").mkdir()
        (root / "newdir" / "y.txt").write_bytes(b"y\n")
        s.snapshot("second")
    return root


@needs_syncfs
@needs_inotify
def test_a_service_store_unlinks_after_the_answer_and_the_watcher_reports_none_of_it(project: Path):
    with Store.open(project, durability="normal", watch=True) as s:
        s.after_answer = []  # (as the service)
        s.snapshot("warm")  # (the watcher's state is built)
        s.restore("latest~2")
        # Answered: the replaced and deleted files are set aside, not yet unlinked.
        assert not (project / "newdir").exists()  # (the deleted files are unlinked at once:
        assert len(_set_aside(project)) == 12  # their directory could go)
        watcher = s.context.watcher
        assert watcher is not None
        unlink, *rest = s.after_answer  # (the unlinks first, then the record after)
        assert unlink() is None
        assert _set_aside(project) == []
        changes = watcher.peek()
        assert not [p for p in changes.paths if p.rpartition(b"/")[2].startswith(TMP_PREFIX)]
        assert changes.dirs == set()
        for work in rest:
            assert work() is None
        assert s.diff("latest~2") == []


@needs_syncfs
def test_a_library_store_unlinks_before_it_returns(project: Path):
    with Store.open(project, durability="normal", watch=True) as s:
        s.restore("latest~1")
        assert _set_aside(project) == []
        assert s.diff("latest~1") == []


def _value(aside: object) -> bytes:
    op = {"kind": "restore", "target": b"t" * 32, "before": b"b" * 32, "time_ns": 1, "boot": "x"}
    applied = {"dirs": [b""], "ids": [], "aside": aside}
    return journal.record({**op, "applied": applied}, [Step("write", b"d/a.txt")])


def test_the_applied_mark_names_the_set_aside_files():
    j = journal.parse(_value([[b"d", TMP_PREFIX + b"7.1"], [b"", TMP_PREFIX + b"7.2"]]))
    assert j.applied is not None and j.applied["aside"] == [[b"d", TMP_PREFIX + b"7.1"], [b"", TMP_PREFIX + b"7.2"]]


@pytest.mark.parametrize("aside", [
    [[b"d", b"a.txt"]],  # not one of our temp names: never unlinked
    [[b"d", TMP_PREFIX + b"x/../../a"]],
    [[b"../out", TMP_PREFIX + b"1"]],
    [[b"d", TMP_PREFIX + b"1", b"more"]],
    "d",
])
def test_a_damaged_set_aside_list_is_refused(aside: object):
    with pytest.raises(CorruptError):
        journal.parse(_value(aside))
