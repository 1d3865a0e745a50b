"""What a checkpoint may decode for its delta bases (issue 40: the stdlib 100-file checkpoint).

A base that is not cached costs a decode of its solid frame up to it (up to 1 MiB; 4 MiB once
consolidated).  A frame is decoded for its bases when that costs at most ``DECODE_RATIO`` times
the new bytes they base (or at most ``DECODE_FLOOR``), or within ``DECODE_BUDGET`` a batch;
otherwise the new chunks are stored whole.
"""

from __future__ import annotations

from snapstore.storage import entries, objects, packs
from snapstore.store import Store
from snapstore.testing import build_tree
from tests.helpers import word_text

WORDS = tuple(w.encode() for w in "import def return class self value frame chunk base store".split())


def _entry(store: Store, cid: bytes) -> entries.PackEntry:
    with store.backend.read() as view:
        value = view.get("chunks", cid)
    assert value is not None
    return entries.parse(cid, value)


def _leaf(store: Store, ref: str, path: str) -> bytes:
    entry = next(e for e in store.entries(ref) if e.path == path.encode())
    with store.backend.read() as view:
        leaves = objects.leaf_ids(view.get, entry.ref, distinct=False)
    assert len(leaves) == 1
    return leaves[0]


def _edit(body: bytes, n: int) -> bytes:
    return body[: len(body) // 2] + b"# edit %d\n" % n + body[len(body) // 2 :]


def _decodes(monkeypatch) -> list[tuple[bytes, int]]:
    """The chunk ids whose frames get decoded from now on, with the plain bytes each decode made."""
    seen: list[tuple[bytes, int]] = []
    real = entries.inflate

    def counting(cid, *a, **k):  # type: ignore[no-untyped-def]
        out = real(cid, *a, **k)
        seen.append((cid, len(out)))
        return out

    monkeypatch.setattr(entries, "inflate", counting)
    return seen


def _frames_of(store: Store, leaves: dict[str, bytes]) -> dict[tuple[bytes, int], list[str]]:
    by_frame: dict[tuple[bytes, int], list[str]] = {}
    for p, cid in leaves.items():
        e = _entry(store, cid)
        by_frame.setdefault((e.pack, e.frame_off), []).append(p)
    return by_frame


def test_bases_deep_in_uncached_solid_frames_decode_within_the_budget_the_rest_stored_whole(tree, store, monkeypatch):
    """Two files at the end of each of several 1 MiB frames, edited after the caches are gone
    (a new process, or evicted): the old frames decoded for their bases produce at most
    DECODE_BUDGET bytes (they would be ~1 MiB each); the other edits are stored whole, and
    every version reads back byte for byte."""
    old = {f"m{i:03d}.py": word_text(7_500, i, WORDS) for i in range(600)}
    build_tree(tree, old)
    a = store.snapshot("a")
    leaves = {p: _leaf(store, a.id, p) for p in old}
    frames = [ps for ps in _frames_of(store, leaves).values() if len(ps) > 100]
    assert len(frames) >= 4
    deepest = [p for ps in frames for p in sorted(ps, key=lambda p: _entry(store, leaves[p]).offset)[-2:]]
    assert all(_entry(store, leaves[p]).offset > 512 << 10 for p in deepest)
    new = {p: _edit(old[p], 1) for p in deepest}
    build_tree(tree, new)
    entries.clear_cache()
    decoded = _decodes(monkeypatch)
    b = store.snapshot("b")
    olds = set(leaves.values())
    assert sum(n for cid, n in decoded if cid in olds) <= packs.DECODE_BUDGET
    codecs = [_entry(store, _leaf(store, b.id, p)).codec for p in deepest]
    assert codecs.count(entries.CODEC_ZSTD) >= 2
    for p in deepest:
        assert store.read_bytes(b.id, p) == new[p]
        assert store.read_bytes(a.id, p) == old[p]
    assert store.verify().ok


def test_a_base_in_a_small_frame_or_cached_is_still_a_delta(tree, store):
    """What stays a delta: a base whose frame is small (a later checkpoint's own pack: the CLI's
    edit loop, one process a checkpoint), a base the process has cached (the service's), and a
    base deep in a big frame when the checkpoint edits only a few files (within the budget)."""
    old = {f"m{i:03d}.py": word_text(7_500, 1000 + i, WORDS) for i in range(150)}
    build_tree(tree, old)
    a = store.snapshot("a")
    p, q = "m148.py", "m149.py"
    build_tree(tree, {p: _edit(old[p], 1)})
    store.snapshot("b")
    entries.clear_cache()
    build_tree(tree, {p: _edit(_edit(old[p], 1), 2)})
    c = store.snapshot("c")
    assert _entry(store, _leaf(store, c.id, p)).codec == entries.CODEC_DELTA
    entries.clear_cache()
    assert store.read_bytes(a.id, q) == old[q]  # (a read caches the chunk)
    build_tree(tree, {q: _edit(old[q], 3)})
    d = store.snapshot("d")
    assert _entry(store, _leaf(store, d.id, q)).codec == entries.CODEC_DELTA
    assert store.read_bytes(d.id, q) == _edit(old[q], 3)
    assert store.read_bytes(c.id, p) == _edit(_edit(old[p], 1), 2)
    entries.clear_cache()
    # deep in the first checkpoint's 1 MiB frame: one step's edit, within the budget
    r = max((n for n in old if n not in (p, q)), key=lambda n: _entry(store, _leaf(store, a.id, n)).offset)
    assert _entry(store, _leaf(store, a.id, r)).offset > 512 << 10
    build_tree(tree, {r: _edit(old[r], 4)})
    e = store.snapshot("e")
    assert _entry(store, _leaf(store, e.id, r)).codec == entries.CODEC_DELTA


def test_the_decode_allowed_scales_with_the_bytes_based():
    """A frame's decode pays when it bases enough new bytes (many files edited in one frame),
    not for a few files deep in a big frame; a small decode always pays."""
    assert packs.decode_pays(1 << 20, 40 * 7_500)
    assert not packs.decode_pays(1 << 20, 2 * 7_500)
    assert packs.decode_pays(packs.DECODE_FLOOR, 600)
    assert not packs.decode_pays(packs.DECODE_FLOOR + 1, 600)


def test_a_checkpoint_of_several_frames_starts_no_thread_once_warm(tree, store, monkeypatch):
    """A checkpoint whose new chunks fill several solid frames compresses them side by side in
    the process's pool: after the first, a long-lived Store (the service) starts no thread for it."""
    import random
    import threading

    rng = random.Random(7)
    names = [f"d/f{i:02d}.bin" for i in range(30)]

    def fresh() -> dict[str, bytes]:  # ~3 MiB of new, incompressible chunks: 3 frames or more
        return {n: rng.randbytes(100_000) for n in names}

    build_tree(tree, fresh())
    store.snapshot("warm-up")
    build_tree(tree, fresh())
    store.snapshot("warm-up 2")
    started: list[str] = []
    real = threading.Thread.start

    def counting(self):  # type: ignore[no-untyped-def]
        started.append(self.name)
        return real(self)

    monkeypatch.setattr(threading.Thread, "start", counting)
    body = fresh()
    build_tree(tree, body)
    c = store.snapshot("measured")
    assert started == []
    assert all(store.read_bytes(c.id, n) == body[n] for n in names)
