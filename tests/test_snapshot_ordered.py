"""A watching Store keeps its entries in path order across snapshots (ops.snapshot.ordered):
edited in the touched places only, and always what a sort of the whole tree gives, with the
same file count and byte total, and "the same entries as before" said exactly when it is so
(random edits, adds, deletes, renames, type changes, touches that change nothing)."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from platform_marks import needs_inotify

from snapstore.ops.snapshot import ordered, walk
from snapstore.store import Store
from snapstore.tree.packed import EntryMap


@pytest.mark.parametrize("packed", [False, True], ids=["entries", "packed-entries"])
def test_ordered_entries_and_totals_match_a_full_sort(tmp_path: Path, monkeypatch, packed: bool):
    """Also with the state's entries kept packed (tree.packed.EntryMap, for big trees: here
    from the first path on), the order then holding the packed values."""
    if packed:
        monkeypatch.setattr(walk, "PACK_ENTRIES_FROM", 0)
    kinds: set[type] = set()
    seen: list[tuple[list, int, int]] = []
    used = {"patched": 0}
    real = ordered._patched

    def checking(kept, entries, touched):
        out = real(kept, entries, touched)
        used["patched"] += 1
        kinds.add(type(entries))
        fresh = ordered.full(entries)
        agrees = out.same == (fresh.entries == kept.entries)  # "the same entries" only when they are
        seen.append((out.entries == fresh.entries and out.paths == fresh.paths and agrees, out.files - fresh.files, out.size - fresh.size))
        return out

    monkeypatch.setattr(ordered, "_patched", checking)
    rng = random.Random(5)
    root = tmp_path / "t"
    for i in range(60):
        (root / f"d{i % 7}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 7}" / f"f{i}.txt").write_text("x" * i)
    with Store.init(root) as s:
        s.close()
    with Store.open(root, watch=True) as store:
        store.snapshot("base")
        time.sleep(0.2)
        for step in range(40):
            files = sorted(p for p in root.rglob("*") if p.is_file() and ".snapstore" not in p.parts)
            for _ in range(rng.randint(1, 4)):
                what = rng.random()
                victim = rng.choice(files)
                if what < 0.4 and victim.exists():
                    victim.write_text("y" * rng.randint(0, 300))
                elif what < 0.6:
                    folder = root / f"d{rng.randint(0, 9)}"
                    folder.mkdir(exist_ok=True)
                    (folder / f"new{step}_{rng.randint(0, 999)}.txt").write_text("n" * step)
                elif what < 0.75 and victim.exists():
                    victim.unlink()
                elif what < 0.9 and victim.exists():
                    victim.rename(victim.with_name("r" + victim.name))
                elif victim.exists():
                    victim.unlink()
                    os.symlink("elsewhere", victim)  # a file becomes a link: not a file any more
            if step % 5 == 0 and files[0].exists():  # sometimes only a touch: an event, maybe no change
                os.utime(files[0])
            time.sleep(0.02)
            cp = store.snapshot(f"step {step}")
            with Store.open(root) as plain:  # a plain Store walks and sorts: no difference
                assert plain.diff(cp.id) == [], step
            files_now = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and ".snapstore" not in p.parts]
            assert cp.stats["files"] == len(files_now), step
            assert cp.stats["bytes"] == sum(p.stat().st_size for p in files_now), step
    assert used["patched"] >= 20  # the incremental path ran
    assert kinds == ({EntryMap} if packed else {dict}), kinds
    assert all(same and df == 0 and ds == 0 for same, df, ds in seen), seen


@needs_inotify
def test_a_checkpoint_with_nothing_touched_copies_no_list(tmp_path: Path):
    """The usual checkpoint (nothing changed since the last) keeps the very lists of the last
    one: no copy of a pointer per file; the next edit still gives what a sort gives."""
    root = tmp_path / "t"
    (root / "d").mkdir(parents=True)
    for i in range(50):
        (root / "d" / f"f{i}.txt").write_text(str(i))
    with Store.init(root) as s:
        s.close()
    with Store.open(root, watch=True) as store:
        store.snapshot("base")
        store.snapshot("again")
        before = store.context.manifest_memo.ordered
        assert before is not None
        store.snapshot("nothing changed", skip_unchanged=True)
        after = store.context.manifest_memo.ordered
        assert after is not None and after.entries is before.entries
        (root / "d" / "f7.txt").write_text("changed")
        (root / "d" / "new.txt").write_text("new")
        time.sleep(0.05)
        cp = store.snapshot("edited")
        assert cp.stats["modified"] == 1 and cp.stats["added"] == 1
        assert store.context.manifest_memo.ordered.entries == ordered.full(
            {e.path: e for e in store.entries(cp.id)}
        ).entries
        assert before.entries is not store.context.manifest_memo.ordered.entries  # (copied to edit)


def test_a_one_file_change_copies_a_chunk_not_the_whole_order():
    """Copy on write (issue 40, the 1M-file rows): editing one path of a kept order of 200,000
    entries allocates O(one chunk), not a pointer per entry (two flat lists of 200,000 were
    ~3.2 MB); the result is what a sort gives, and the kept order is unchanged."""
    import tracemalloc

    from snapstore.records.manifest import FILE, Entry

    n = 200_000
    entries = {f"d{i // 1000:04d}/f{i:07d}".encode(): Entry(f"d{i // 1000:04d}/f{i:07d}".encode(), FILE, 0o644, i % 97, 0, b"r" * 32) for i in range(n)}
    kept = ordered.full(entries)
    before = list(kept.entries)
    path = b"d0123/f0123456"
    patched = dict(entries)
    patched[path] = Entry(path, FILE, 0o644, 5, 1, b"s" * 32)
    added = b"d0150/f0150000x"
    patched[added] = Entry(added, FILE, 0o644, 7, 1, b"t" * 32)
    tracemalloc.start()
    try:
        out = ordered.order(kept, entries, patched, {path, added}, entries)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100_000, peak  # (two chunks of 1,024 pointers, twice, and the outer list)
    assert list(out.entries) == list(ordered.full(patched).entries)
    assert out.files == n + 1 and out.size == kept.size - entries[path].size + 5 + 7
    assert list(kept.entries) == before  # (the kept order is as it was)
    assert not out.same and out.span is not None and out.span[0] is kept.entries


def test_an_edit_that_moves_no_chunk_shares_the_index_lists():
    """A modified file (no chunk's length or first path changed) keeps the kept order's
    ``firsts`` and ``starts`` (one item a chunk: ~1,000 at a million files), the very lists;
    an added, a removed or a first path changed makes them what building the order gives."""
    from snapstore.records.manifest import FILE, Entry

    def entry(path: bytes, size: int) -> Entry:
        return Entry(path, FILE, 0o644, size, 0, b"r" * 32)

    n = 20_000
    entries = {p: entry(p, 1) for p in (f"d{i // 1000:02d}/f{i:06d}".encode() for i in range(n))}
    kept = ordered.full(entries)
    steps: list[tuple[str, bytes]] = [
        ("modify", b"d03/f003500"),
        ("modify", b"d00/f000000"),  # (the first path of a chunk, its entry changed only)
        ("add", b"d07/f007000a"),
        ("remove", b"d11/f011000"),
        ("add", b"0first"),  # (before every path: the first chunk's first path changes)
        ("modify", b"d19/f019999"),
    ]
    for how, path in steps:
        patched = dict(entries)
        if how == "remove":
            del patched[path]
        else:
            patched[path] = entry(path, 7)
        out = ordered.order(kept, entries, patched, {path}, entries).entries
        fresh = ordered.Chunked(out.chunks, out.packed)  # (its lists made from its chunks)
        assert out.firsts == fresh.firsts and out.starts == fresh.starts and len(out) == len(patched), how
        assert list(out) == list(ordered.full(patched).entries), how
        if how == "modify":
            assert out.firsts is kept.entries.firsts and out.starts is kept.entries.starts, path
        else:
            assert out.starts is not kept.entries.starts, path
        kept = ordered.Ordered(out, 0, 0)
        entries = patched
