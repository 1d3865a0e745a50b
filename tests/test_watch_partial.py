"""A watching Store patches its tree state instead of walking (issue 11, requirements 4, 5, 10).

Created, deleted and renamed files, new and removed directories are handled by listing again
only the directories the watcher names (``tree.rescan``) and walking only new subtrees.  The
differential tests check that the result is exactly a full walk's: after random sequences of
edits, the manifest a watched snapshot records has the same id as the one a second,
non-watching store records for the same quiescent tree, and ``diff`` against the working tree
through the watcher's state equals the walking one.  The counting tests bound the work through
the scan's seams (directories listed), so they do not depend on the machine.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest
from helpers import FILE_EDITS, assert_state_is_a_walk, edit_file
from platform_marks import needs_inotify

from snapstore.platform import linux
from snapstore.store import Store
from snapstore.testing import build_tree
from snapstore.tree import rescan, scan, worktree

pytest.importorskip("inotify_simple")

START = {
    "a.txt": b"a\n",
    "src/b.py": b"b\n",
    "src/pkg/c.py": b"c\n",
    "src/pkg/deep/d.py": b"d\n",
    "docs/r.md": b"r\n",
    "build/out.o": b"object\n",
    "empty/.keep": b"",
    ".gitignore": b"build/\n*.log\n",
}


def _walkable(root: Path) -> tuple[list[Path], list[Path]]:
    files, dirs = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".snapstore"]
        dirs += [Path(dirpath) / d for d in dirnames if not os.path.islink(Path(dirpath) / d)]
        files += [Path(dirpath) / f for f in filenames if (Path(dirpath) / f).is_file() and not (Path(dirpath) / f).is_symlink()]
    return sorted(f for f in files if f.name != ".gitignore"), sorted(dirs)


def edit(root: Path, outside: Path, rng: random.Random, i: int) -> str:
    """One random edit of the tree (the kinds requirement 10 names, and a few more)."""
    files, dirs = _walkable(root)
    op = rng.choice(
        ["write", "append", "same-size", "rename", "rmtree", "mkdir", "mkdir-tree", "symlink",
         "chmod", "file-to-dir", "dir-to-file", "new-file", "new-file", "ignore-file",
         "in-ignored", "move-dir", "move-out", "move-in", "rmdir-empty", "fifo", "delete",
         "dir-replaced", "file-dir-file", "bad-name", "checkout", "checkout", "replace-by-rename",
         "create-delete", "new-ignored", "hard-link", "setuid"]
    )
    if op in ("write", "append", "same-size", "rename", "chmod", "file-to-dir", "delete", "checkout",
              "replace-by-rename", "hard-link", "setuid") and not files:
        op = "new-file"
    if op == "file-dir-file" and not files:
        op = "new-file"
    if op in ("rmtree", "dir-to-file", "move-dir", "move-out", "dir-replaced") and not dirs:
        op = "mkdir"
    if op in FILE_EDITS:
        edit_file(op, rng.choice(files), i, rng)
    elif op == "rename":
        f = rng.choice(files)
        f.rename(rng.choice([root, *dirs]) / f"moved{i}.txt")
    elif op == "delete":
        rng.choice(files).unlink()
    elif op == "rmtree":
        shutil.rmtree(rng.choice(dirs))
    elif op == "mkdir":
        (rng.choice([root, *dirs]) / f"d{i}").mkdir()
    elif op == "mkdir-tree":
        base = rng.choice([root, *dirs]) / f"t{i}"
        (base / "x" / "y").mkdir(parents=True)
        (base / "x" / "f.py").write_bytes(b"f %d\n" % i)
        if rng.random() < 0.5:
            (base / ".gitignore").write_bytes(b"*.py\n")
    elif op == "symlink":  # swapped in place, as ln -sfn does (a rename over the old link)
        link = rng.choice([root, *dirs]) / "link"
        tmp = link.with_name(f".link{i}")
        tmp.symlink_to(f"target{i}")
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)
        tmp.replace(link)
    elif op == "file-to-dir":
        f = rng.choice(files)
        f.unlink()
        f.mkdir()
        (f / "x").write_bytes(b"x")
    elif op == "dir-to-file":
        d = rng.choice(dirs)
        shutil.rmtree(d)
        d.write_bytes(b"was a directory %d\n" % i)
    elif op == "dir-replaced":  # the same name, another directory
        d = rng.choice(dirs)
        shutil.rmtree(d)
        d.mkdir()
        (d / f"r{i}.txt").write_bytes(b"replaced\n")
    elif op == "file-dir-file":  # a file replaced by a directory and back
        f = rng.choice(files)
        f.unlink()
        f.mkdir()
        (f / "x").write_bytes(b"x")
        shutil.rmtree(f)
        f.write_bytes(b"a file again %d\n" % i)
    elif op == "bad-name":  # a name that is not UTF-8
        base = os.fsencode(rng.choice([root, *dirs]))
        fd = os.open(base + b"/bad\xff%d.txt" % i, os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"bytes name\n")
        os.close(fd)
    elif op == "ignore-file":
        (rng.choice([root, *dirs]) / ".gitignore").write_bytes(
            rng.choice([b"*.txt\n", b"moved*\n", b"", b"d*/\n", b"**/a*b*c*d*e\nn1*\n"])  # (one pattern too wild: warned)
        )
    elif op == "in-ignored":
        if (root / "build").is_symlink() or (root / "build").is_file():
            (root / "build").unlink()
        (root / "build").mkdir(exist_ok=True)
        (root / "build" / f"gen{i}.o").write_bytes(b"ignored %d\n" % i)
        (root / f"log{i}.log").write_bytes(b"ignored too\n")
    elif op == "move-dir":
        d = rng.choice(dirs)
        target = rng.choice([root, *[x for x in dirs if x != d and d not in x.parents]])
        d.rename(target / f"m{i}")
    elif op == "move-out":
        rng.choice(dirs).rename(outside / f"out{i}")
    elif op == "move-in":
        src = outside / f"in{i}"
        (src / "sub").mkdir(parents=True)
        (src / "sub" / "k.py").write_bytes(b"k %d\n" % i)
        src.rename(rng.choice([root, *dirs]) / f"in{i}")
    elif op == "rmdir-empty":
        empties = [d for d in dirs if not any(d.iterdir())]
        if empties:
            rng.choice(empties).rmdir()
    elif op in ("checkout", "replace-by-rename", "create-delete", "new-ignored", "hard-link", "setuid"):
        _edit_names(op, root, files, dirs, rng, i)
    elif op == "fifo":
        os.mkfifo(rng.choice([root, *dirs]) / f"fifo{i}")
    else:
        (rng.choice([root, *dirs]) / f"n{i}.py").write_bytes(b"print(%d)\n" % i)
    return op


def _edit_names(op: str, root: Path, files: list[Path], dirs: list[Path], rng: random.Random, i: int) -> None:
    """Edits that change which names a directory holds and nothing else (the listing is patched
    from the events' names, without listing the directory again), and a few that must not be."""
    f = rng.choice(files)
    if op == "checkout":  # as git's checkout writes: each file unlinked and created again
        for g in [f, *rng.sample(files, min(len(files), rng.randint(0, 3)))]:
            if g.exists():
                g.unlink()
                g.write_bytes(b"checked out %d %s\n" % (i, os.fsencode(g.name)))
        if rng.random() < 0.5:
            (f.parent / f"added{i}.py").write_bytes(b"added\n")
    elif op == "replace-by-rename":  # an editor's save: a temp file renamed over the old one
        tmp = f.parent / f".{f.name}.swp{i}"
        tmp.write_bytes(b"saved %d\n" % i)
        tmp.replace(f)
    elif op == "create-delete":  # a name that came and went between two snapshots
        tmp = rng.choice([root, *dirs]) / f"tmp{i}.txt"
        tmp.write_bytes(b"gone soon\n")
        tmp.unlink()
    elif op == "new-ignored":  # a name the directory's rules ignore
        (f.parent / f"trace{i}.log").write_bytes(b"ignored\n")
    elif op == "hard-link":
        os.link(f, f.parent / f"link{i}.txt")
    else:  # setuid: a bit never recorded, and counted
        f.chmod(0o4755)


def _same_diff(watched: Store, plain: Store) -> None:
    """``diff`` against the working tree: through the watcher's state = by a walk."""
    via_state = watched.diff()
    walked = plain.diff()
    assert via_state == walked, ([(c.status, c.path) for c in via_state], [(c.status, c.path) for c in walked])


@pytest.mark.parametrize("seed", range(8))
def test_watched_manifests_equal_full_walks(tmp_path: Path, seed: int, monkeypatch):
    rng = random.Random(seed)
    by_names: list[bool] = []  # the listings patched from the events' names alone
    real = rescan._Patcher.by_names
    monkeypatch.setattr(rescan._Patcher, "by_names", lambda *a: by_names.append(real(*a)) or by_names[-1])
    root, outside = tmp_path / "t", tmp_path / "outside"
    outside.mkdir()
    build_tree(root, START)
    Store.init(root).close()
    Store.init(root, store=tmp_path / "other").close()
    watched = Store.open(root, watch=True)
    plain = Store.open(root)  # the same store, walking: diff's reference
    other = Store.open(store=tmp_path / "other")  # another store of the tree, walking
    try:
        watched.snapshot("start")
        for i in range(30):
            ops = [edit(root, outside, rng, i * 10 + k) for k in range(rng.choice([1, 1, 2, 3]))]
            _same_diff(watched, plain)  # before the snapshot: the changes are still pending
            cp = watched.snapshot(f"step {i} {ops}")
            ref = other.snapshot(f"step {i}")
            assert cp.manifest == ref.manifest, (i, ops, [(c.status, c.path) for c in plain.diff(cp.id)])
            # what the snapshot reports (skipped FIFOs, bad ignore patterns, ...) is a walk's too
            assert (cp.warnings, cp.stats["skipped"]) == (ref.warnings, ref.stats["skipped"]), (i, ops)
            _same_diff(watched, plain)
            assert_state_is_a_walk(watched, root)  # the records and every listing
        if linux():  # (polling names a directory whose listing it saw change, on its own clock)
            assert by_names.count(True) >= 5  # (the fast path was what was tested, and left alone)
        status = watched.watch_status()
        assert status is not None and status["divergences"] == 0
        # The patching was what was tested.  (The polling source names again, by design, a file
        # written within a tick of its last look: an ignore file among those means a full walk.)
        least = (20, 40) if status["events_from"] == "inotify" else (1, 1)
        assert status["patched"] >= least[0] and status["looks"] >= least[1]
    finally:
        watched.close()
        plain.close()
        other.close()


def _count_listings(monkeypatch) -> list[int]:
    """Count the directories the scan lists (its scandir seam), walks and re-listings alike."""
    listed: list[int] = []
    real = scan._scandir

    def counting(fd):
        listed.append(fd)
        return real(fd)

    monkeypatch.setattr(scan, "_scandir", counting)
    return listed


def _wide_tree(root: Path) -> None:
    build_tree(root, {f"pkg{i}/sub{j}/m{k}.py": b"x = %d\n" % k for i in range(10) for j in range(5) for k in range(4)})


def test_a_new_file_lists_one_directory(tmp_path: Path, monkeypatch):
    root = tmp_path / "t"
    _wide_tree(root)  # 61 directories
    Store.init(root).close()
    with Store.open(root, watch=True) as s:
        s.snapshot("start")  # the first snapshot walks
        listed = _count_listings(monkeypatch)
        (root / "pkg3" / "sub2" / "new.py").write_bytes(b"new\n")
        cp = s.snapshot("a new file")
        assert s.read_bytes(cp.id, "pkg3/sub2/new.py") == b"new\n"
        # not even pkg3/sub2: the entries the events name are lstat-ed, the listing patched
        assert len(listed) == 0
        os.unlink(root / "pkg3" / "sub2" / "m0.py")
        os.rename(root / "pkg5" / "sub1" / "m1.py", root / "pkg5" / "sub1" / "renamed.py")
        cp = s.snapshot("a deleted and a renamed file")
        assert len(listed) == 0
        paths = {e.path for e in s.entries(cp.id)}
        assert b"pkg3/sub2/m0.py" not in paths and b"pkg5/sub1/renamed.py" in paths
        assert b"pkg5/sub1/m1.py" not in paths
        (root / "pkg5" / "sub1" / "new").mkdir()  # a new subdirectory: its parent is listed
        s.snapshot("an empty directory")
        assert len(listed) == 2  # pkg5/sub1 listed again, pkg5/sub1/new walked


def test_a_new_directory_walks_only_itself(tmp_path: Path, monkeypatch):
    root = tmp_path / "t"
    _wide_tree(root)
    Store.init(root).close()
    with Store.open(root, watch=True) as s:
        s.snapshot("start")
        listed = _count_listings(monkeypatch)
        build_tree(root / "pkg1" / "fresh", {"a/x.py": b"x\n", "b/y.py": b"y\n"})
        shutil.rmtree(root / "pkg2")  # 6 directories gone
        cp = s.snapshot("a new subtree, a removed one")
        paths = {e.path for e in s.entries(cp.id)}
        assert {b"pkg1/fresh/a/x.py", b"pkg1/fresh/b/y.py"} <= paths
        assert not any(p.startswith(b"pkg2/") for p in paths)
        # pkg1 and the root listed again; pkg1/fresh, its a and b walked (the watcher lists a
        # new directory too, through its own scandir: not counted here)
        assert len(listed) <= 5


def test_a_changed_ignore_file_walks(tmp_path: Path, monkeypatch):
    root = tmp_path / "t"
    _wide_tree(root)
    Store.init(root).close()
    with Store.open(root, watch=True) as s:
        s.snapshot("start")
        walks = []
        real = scan.walk
        monkeypatch.setattr(scan, "walk", lambda *a, **k: walks.append(1) or real(*a, **k))
        (root / "pkg4" / ".gitignore").write_bytes(b"m1.py\n")
        cp = s.snapshot("ignore m1.py below pkg4")
        assert walks == [1]  # the rules kept in the listings may be stale: a full walk
        paths = {e.path for e in s.entries(cp.id)}
        assert b"pkg4/sub0/m1.py" not in paths and b"pkg3/sub0/m1.py" in paths


def test_status_through_the_watcher_does_not_walk_nor_consume(tmp_path: Path, monkeypatch):
    root = tmp_path / "t"
    _wide_tree(root)
    Store.init(root).close()
    with Store.open(root, watch=True) as s:
        s.snapshot("start")
        listed = _count_listings(monkeypatch)
        (root / "pkg0" / "sub0" / "m0.py").write_bytes(b"changed\n")
        (root / "pkg7" / "sub3" / "added.py").write_bytes(b"added\n")
        shutil.rmtree(root / "pkg9" / "sub4")
        for _ in range(2):  # twice: the first look consumed nothing
            changes = {(c.status, c.path) for c in s.diff()}
            assert (("M", b"pkg0/sub0/m0.py") in changes and ("A", b"pkg7/sub3/added.py") in changes
                    and ("D", b"pkg9/sub4/m2.py") in changes), changes
            assert len(changes) == 6
        assert len(listed) == 2  # pkg9 (a subdirectory gone), twice; never the 61 directories
        cp = s.snapshot("after two looks")  # the changes were still pending for the snapshot
        assert s.read_bytes(cp.id, "pkg7/sub3/added.py") == b"added\n"
        assert s.read_bytes(cp.id, "pkg0/sub0/m0.py") == b"changed\n"
        assert not any(e.path.startswith(b"pkg9/sub4") for e in s.entries(cp.id))
        assert s.diff() == []


def _count_walks(monkeypatch) -> list[int]:
    walks: list[int] = []
    real = scan.walk
    monkeypatch.setattr(scan, "walk", lambda *a, **k: walks.append(1) or real(*a, **k))
    return walks


def test_restores_through_the_watcher_do_not_walk(tmp_path: Path, monkeypatch):
    """The safety checkpoint comes from the dirty set, and a restore that creates and removes
    files and directories leaves a state the next snapshot patches, not a walk."""
    import time

    from snapstore.ops.snapshot import read as snapshot_read
    from snapstore.tree import statcache

    # Files read from now on are old enough for the racy-file rule (no sleeping).
    monkeypatch.setattr(statcache, "now_ns", lambda: time.time_ns() + 10 * statcache.RACY_MARGIN_NS)
    root = tmp_path / "t"
    _wide_tree(root)
    Store.init(root).close()
    with Store.open(root, watch=True) as s, Store.open(root) as plain:
        x = s.snapshot("X")
        (root / "pkg0" / "sub0" / "m0.py").write_bytes(b"y\n")
        (root / "pkg1" / "sub1" / "new.py").write_bytes(b"new\n")
        shutil.rmtree(root / "pkg2" / "sub2")
        build_tree(root / "pkg3" / "fresh", {"f.py": b"f\n"})
        y = s.snapshot("Y")

        def reference() -> list:  # a full walk of the tree (not counted), every field compared
            monkeypatch.setattr(scan, "walk", real_walk)
            try:
                walked, _ = worktree.current_state(plain)
            finally:
                monkeypatch.setattr(scan, "walk", counting)
            return [walked[p] for p in sorted(walked)]

        walks: list[int] = []
        real_walk = scan.walk

        def counting(*a, **k):
            walks.append(1)
            return real_walk(*a, **k)

        monkeypatch.setattr(scan, "walk", counting)
        opened: list[bytes] = []
        real_open = snapshot_read._open
        monkeypatch.setattr(snapshot_read, "_open", lambda *a, **k: opened.append(a[1]) or real_open(*a, **k))
        for i in range(3):
            report = s.restore(x.id)  # removes, creates and rewrites files and directories
            assert report.safety is not None
            again = s.snapshot(f"after restore {i}", skip_unchanged=True)
            assert s.entries(again.id) == reference()
            assert {e.path: e.ref for e in s.entries(again.id)} == {e.path: e.ref for e in s.entries(x.id)}
            (root / "pkg5" / "sub0" / f"other{i}.py").write_bytes(b"someone else\n")  # in between
            os.unlink(root / "pkg5" / "sub0" / f"other{i}.py")
            s.restore(y.id)
            assert s.entries(s.snapshot(f"at Y {i}", skip_unchanged=True).id) == reference()
        assert walks == []
        assert opened == []  # nothing the restores wrote was read back


def test_status_through_the_service_gives_the_walking_bytes(tmp_path: Path):
    """``diff`` (and ``restore --dry-run``) answered from the service's watcher state print
    exactly what an in-process walk prints."""
    import subprocess
    import sys

    from helpers import subprocess_env

    from snapstore.service import daemon

    def run(*argv: str, through: bool) -> subprocess.CompletedProcess[bytes]:
        head = ["-c", "from snapstore.service.client import run; run()"] if through else ["-m", "snapstore"]
        return subprocess.run([sys.executable, *head, *argv], cwd=root, capture_output=True,
                              env=subprocess_env(), timeout=120)

    root = tmp_path / "proj"
    build_tree(root, {"a.txt": b"alpha\n", "src/b.py": b"print(1)\n", "src/deep/c.py": b"c\n", "gone/x.txt": b"x\n"})
    store_dir = str(root / ".snapstore")
    Store.init(root).close()
    daemon.start_detached(store_dir, 60)
    try:
        assert run("snapshot", "-q", "-m", "through the service", through=True).returncode == 0
        (root / "a.txt").write_bytes(b"alpha\nbeta\n")
        (root / "src" / "new.py").write_bytes(b"new\n")
        (root / "src" / "deep" / "c.py").unlink()
        shutil.rmtree(root / "gone")
        build_tree(root / "fresh", {"f.txt": b"f\n"})
        first = daemon.status(store_dir)
        assert first is not None
        for argv in (["diff"], ["diff", "--stat"], ["diff", "--json"], ["diff", "-p"], ["diff", "latest", "--", "src"],
                     ["restore", "latest", "--dry-run"]):
            via, here = run(*argv, through=True), run(*argv, through=False)
            assert (via.stdout, via.stderr, via.returncode) == (here.stdout, here.stderr, here.returncode), argv
        info = daemon.status(store_dir)
        assert info is not None and info["requests"] - first["requests"] == 6
        assert info["watcher"]["looks"] - first["watcher"]["looks"] == 6  # each answered from the state
        assert info["watcher"]["walks"] == first["watcher"]["walks"] == 1  # the first snapshot's
    finally:
        daemon.stop(store_dir)


def test_a_revert_plan_through_the_watcher_does_not_walk(tmp_path: Path, monkeypatch):
    """revert reads the tree as it is (to keep the user's own edits): a watching Store answers
    from its state, with the plan a walking Store makes."""
    root = tmp_path / "t"
    _wide_tree(root)
    Store.init(root).close()
    with Store.open(root, watch=True) as s:
        s.snapshot("start")
        (root / "pkg1" / "sub1" / "m1.py").write_bytes(b"agent's edit\n")
        agent = s.snapshot("agent")
        (root / "pkg2" / "sub2" / "m2.py").write_bytes(b"user's own edit\n")  # not recorded yet
        walks = _count_walks(monkeypatch)
        report = s.revert(agent.id, dry_run=True)
        assert walks == []
    with Store.open(root) as plain:  # the same plan from a walk
        assert plain.revert(agent.id, dry_run=True).to_json() == report.to_json()


@needs_inotify
def test_a_diff_against_the_last_checkpoint_compares_only_what_the_events_touched(tmp_path: Path, monkeypatch):
    """``diff`` against the checkpoint a watching Store last wrote answers from the paths the
    pending events touched (ctx.manifest_memo holds that manifest's entries): the manifest is
    not compared with the whole tree.  Against an older checkpoint it is.  Both answers are a
    walk's."""
    from snapstore.ops import diff as diff_mod

    root = tmp_path / "t"
    build_tree(root, START)
    Store.init(root).close()
    compared: list[bytes] = []  # the manifests compared with the whole tree
    real = diff_mod.difference_from_tree

    def counting(get, mid, tree):
        compared.append(mid)
        return real(get, mid, tree)

    monkeypatch.setattr(diff_mod, "difference_from_tree", counting)
    with Store.open(root, watch=True) as watched, Store.open(root) as plain:
        first = watched.snapshot("one")
        (root / "src" / "b.py").write_bytes(b"b, edited\n")
        last = watched.snapshot("two")
        (root / "a.txt").write_bytes(b"a, edited\n")
        walked = plain.diff(last.id), plain.diff(first.id)
        compared.clear()
        assert watched.diff(last.id) == walked[0] and [c.path for c in walked[0]] == [b"a.txt"]
        assert compared == []
        assert watched.diff(first.id) == walked[1] and len(walked[1]) == 2
        assert compared == [first.manifest]
