"""A watched checkpoint's report (warnings, special and unreadable counts) costs O(changed): the
listings are gone through again only when a directory was listed again, never for a file
edited in place, and the report is still what a walk of the tree would give."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from snapstore.ops.snapshot import incremental
from snapstore.store import Store


def _tree(root: Path, dirs: int, per_dir: int) -> list[Path]:
    files = []
    for d in range(dirs):
        sub = root / f"d{d:03d}"
        sub.mkdir(parents=True)
        for i in range(per_dir):
            p = sub / f"f{i:02d}.txt"
            p.write_text(f"{d} {i}\n")
            files.append(p)
    os.mkfifo(root / "d007" / "pipe")  # (a special file: a warning every checkpoint reports)
    return files


@pytest.fixture(scope="module")
def watched(tmp_path_factory):  # (module-wide: each test leaves the tree as it found it)
    tree = tmp_path_factory.mktemp("report") / "tree"
    files = _tree(tree, 200, 25)  # 5,000 files in 200 directories
    Store.init(tree).close()
    store = Store.open(tree, watch=True)
    store.maintain_after_snapshot = False
    first = store.snapshot("first")
    yield tree, files, store, first
    store.close()


def _count_listings(monkeypatch) -> list[int]:
    seen: list[int] = []
    real = incremental._walk_report

    def counting(report, listings):  # type: ignore[no-untyped-def]
        seen.append(len(listings))
        return real(report, listings)

    monkeypatch.setattr(incremental, "_walk_report", counting)
    return seen


def test_a_file_edited_in_place_goes_through_no_listing_and_reports_as_a_walk(watched, monkeypatch):
    tree, files, store, first = watched
    assert any("pipe" in w for w in first.warnings)
    store.snapshot("settled")  # (the state's report is known from here on)
    seen = _count_listings(monkeypatch)
    for n in range(3):
        with open(files[1234 + n], "a") as f:
            f.write("edited\n")
        cp = store.snapshot(f"edit {n}")
        assert cp.warnings == first.warnings  # what a walk reports
    assert seen == []


def test_a_directory_listed_again_updates_the_report(watched, monkeypatch):
    tree, files, store, first = watched
    store.snapshot("settled")
    seen = _count_listings(monkeypatch)
    os.mkfifo(tree / "d150" / "another")
    cp = store.snapshot("a new special file")
    assert seen and any("another" in w for w in cp.warnings)
    assert len(cp.warnings) == len(first.warnings) + 1
    os.unlink(tree / "d150" / "another")
    cp = store.snapshot("gone again")
    assert cp.warnings == first.warnings
