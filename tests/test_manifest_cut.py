"""Manifest chunks are part of the format: the bulk encoder must cut and encode exactly as the
record-by-record definition does, or a new version would stop deduplicating old manifests."""

from __future__ import annotations

import random

import msgpack
import pytest

from snapstore.records import manifest, manifest_codec
from snapstore.records.manifest import EXEC, FILE, SYMLINK, Entry
from snapstore.records.manifest_codec import Codec
from snapstore.storage import chunker, objects


def _reference(entries: list[Entry]) -> list[bytes]:
    records = [(e.path, msgpack.packb([e.path, e.kind, e.mode, e.size, e.mtime_ns, e.ref])) for e in entries]
    return [b"".join(g) for g in chunker.cut_records(records)]


def _entries(rng: random.Random, n: int, big: bool = False) -> list[Entry]:
    paths = sorted({bytes(rng.choice(b"abcdef/") for _ in range(rng.randint(1, 30))) + b"x" for _ in range(n)})
    out = []
    for p in paths:
        kind = SYMLINK if big else rng.choice([FILE, FILE, EXEC, SYMLINK])
        # big: ~6-30 KiB records, so most chunks end on the size rule, not on a key
        ref = rng.randbytes(32) if kind != SYMLINK else rng.randbytes(rng.randint(6000, 30000) if big else rng.randint(1, 40))
        out.append(Entry(p, kind, 0o100644, rng.randint(0, 1 << 40), rng.randint(0, 1 << 62), ref))
    return out


@pytest.mark.parametrize("with_codec", [False, True], ids=["whole", "codec"])
@pytest.mark.parametrize("seed", range(8))
def test_write_manifest_stores_the_reference_chunks(seed, with_codec):
    rng = random.Random(seed)
    entries = _entries(rng, rng.choice([0, 1, 50, 2000]))
    codec = Codec()
    versions = [entries]
    if entries:  # then one entry changed, re-encoded through the codec the first call filled
        i = rng.randrange(len(entries))
        versions.append(entries[:i] + [entries[i]._replace(size=entries[i].size + 1)] + entries[i + 1 :])
    for version in versions:
        stored: dict[bytes, bytes] = {}
        if with_codec:
            _, size, _ = manifest_codec.write_manifest(codec, version, stored.__setitem__, encode=False)
        else:
            _, size, _ = manifest.write_manifest(version, stored.__setitem__, encode=False)
        expected = _reference(version)
        for chunk in expected:
            assert stored.get(objects.chunk_id(chunk)) == chunk, "a reference chunk is missing"
        assert size == sum(len(c) for c in expected)


def _mutate(rng: random.Random, entries: list[Entry], big: bool = False) -> list[Entry]:
    out = list(entries)
    for _ in range(rng.choice([1, 1, 2, 5, 40])):
        op = rng.random()
        if op < 0.35 and out:  # a file changed (sometimes to a huge symlink-like ref: forced cuts)
            i = rng.randrange(len(out))
            ref = rng.randbytes(32) if rng.random() < 0.9 and not big else rng.randbytes(rng.choice([9000, 30000]))
            out[i] = out[i]._replace(size=rng.randint(0, 99), ref=ref, kind=FILE if len(ref) == 32 else SYMLINK)
        elif op < 0.65:  # a new path, anywhere (or past the end)
            path = bytes(rng.choice(b"abcdef/") for _ in range(rng.randint(1, 20))) + b"y"
            if all(e.path != path for e in out):
                out.append(Entry(path, FILE, 0o100644, 1, 2, rng.randbytes(32)))
                out.sort()
        elif out:  # a path deleted, sometimes a run of them
            i = rng.randrange(len(out))
            del out[i : i + rng.choice([1, 1, 3, 50])]
    return out


@pytest.mark.parametrize("big", [False, True])
@pytest.mark.parametrize("seed", range(30))
def test_the_codec_re_encodes_a_changing_manifest_exactly(seed, big):
    """Many steps of random edits (changes, inserts, deletes, runs, huge records that force cuts,
    everything deleted): each incremental encoding equals the whole-list reference."""
    rng = random.Random(1000 + seed)
    entries = _entries(rng, rng.choice([1, 40, 600]), big)
    codec = Codec()
    for step in range(25):
        stored: dict[bytes, bytes] = {}
        manifest_codec.write_manifest(codec, entries, stored.__setitem__, encode=False)
        expected = _reference(entries)
        assert codec.encoded() == expected, f"step {step}"
        for chunk in expected:
            assert stored.get(objects.chunk_id(chunk)) == chunk
        before = entries
        entries = _mutate(rng, entries, big) if step != 20 else []
        manifest_codec.write_manifest(codec, entries, {}.__setitem__, encode=False)
        if codec.changed is not None:  # every entry outside the changed region is the same
            old_part, new_part = codec.changed
            assert {e.path for e in before} - {e.path for e in old_part} == {e.path for e in entries} - {e.path for e in new_part}
        assert codec.encoded() == _reference(entries), f"step {step} (after the edit)"
        if step == 20:
            entries = _entries(rng, 30, big)


@pytest.mark.parametrize("block", [1, 3, 7, 64])
@pytest.mark.parametrize("big", [False, True])
def test_a_whole_manifest_cut_in_blocks_is_the_whole_list_cut(monkeypatch, block, big):
    """Encoded a block at a time (so no call holds every entry's encoding), the chunks are still
    those of cutting the whole list: a block's unfinished last chunk starts the next one."""
    monkeypatch.setattr(manifest, "_BLOCK", block)
    rng = random.Random(block * 2 + big)
    entries = _entries(rng, 300, big)
    stored: dict[bytes, bytes] = {}
    _, size, _ = manifest.write_manifest(entries, stored.__setitem__, encode=False)
    expected = _reference(entries)
    for chunk in expected:
        assert stored.get(objects.chunk_id(chunk)) == chunk
    assert size == sum(len(c) for c in expected)


@pytest.mark.parametrize("block", [1, 3, 7, 64])
@pytest.mark.parametrize("big", [False, True])
def test_a_codecs_first_fill_cut_in_blocks_is_the_whole_list_cut(monkeypatch, block, big):
    """A codec's first (whole) encoding is cut a block at a time too (the service's first
    manifest through it holds no record of every entry): the same chunks, and each chunk's end
    is where the next encoding's re-cut around an edit starts from."""
    monkeypatch.setattr(manifest, "_BLOCK", block)
    rng = random.Random(100 + block * 2 + big)
    entries = _entries(rng, 300, big)
    codec = Codec()
    manifest_codec.write_manifest(codec, entries, {}.__setitem__, encode=False)
    assert codec.encoded() == _reference(entries)
    ends, at = [], 0
    for chunk in codec.encoded():
        while at < len(entries) and b"".join(_reference(entries[ends[-1] if ends else 0 : at + 1])) != chunk:
            at += 1
        ends.append(at + 1)
    assert codec.ends == ends
    for step in range(5):
        entries = _mutate(rng, entries, big)
        manifest_codec.write_manifest(codec, entries, {}.__setitem__, encode=False)
        assert codec.encoded() == _reference(entries), f"edit {step}"


@pytest.mark.parametrize("big", [False, True])
@pytest.mark.parametrize("seed", range(20))
def test_scattered_runs_re_cut_on_their_own_are_the_whole_encoding(seed, big):
    """The runs a watching snapshot's ordered patch gives (ops.snapshot.ordered): each re-cut on
    its own, the chunks are still exactly the whole-list reference, every new chunk is handed
    over when the last encoding is stored, and the changed entries are reported."""
    from snapstore.ops.snapshot import ordered as ordering

    rng = random.Random(5000 + seed)
    entries = _entries(rng, rng.choice([40, 600, 3000]), big)
    kept = ordering.full({e.path: e for e in entries})
    codec = Codec()
    stored: dict[bytes, bytes] = {}
    manifest_codec.write_manifest(codec, kept.entries, stored.__setitem__, encode=False)
    for step in range(15):
        new = {e.path: e for e in _mutate(rng, kept.entries, big)}
        for _ in range(rng.choice([0, 3, 30])):  # scattered edits too
            if new:
                p = rng.choice(sorted(new))
                new[p] = new[p]._replace(size=new[p].size + 1)
        before = {e.path: e for e in kept.entries}
        touched = {p for p in before.keys() | new.keys() if before.get(p) != new.get(p)}
        touched |= set(rng.sample(sorted(before), min(3, len(before))))  # (touched, unchanged)
        patched = ordering.order(kept, before, new, touched, before)
        assert patched.entries == [new[p] for p in sorted(new)]
        handed: dict[bytes, bytes] = {}
        manifest_codec.write_manifest(codec, patched.entries, handed.__setitem__, encode=False, stored=True, span=patched.span)
        stored.update(handed)
        expected = _reference(patched.entries)
        assert codec.encoded() == expected, f"step {step}"
        assert all(objects.chunk_id(c) in stored for c in expected)  # (nothing new was withheld)
        if codec.changed is not None:  # (None after an empty manifest: encoded whole)
            old_part, new_part = codec.changed
            assert {e.path for e in old_part} | {e.path for e in new_part} == {
                p for p in touched if before.get(p) != new.get(p)
            }
        kept = patched


@pytest.mark.parametrize("first", [True, False], ids=["first-fill", "not-stored"])
def test_chunks_known_stored_are_not_handed_over_again(first):
    """``skip`` (the parent manifest's chunks, when the codec's last encoding is not it): the
    same manifest, and only the chunks outside it are handed over."""
    rng = random.Random(77)
    parent = _entries(rng, 2000)
    codec = Codec()
    if not first:  # a last encoding that is not the parent's (another writer's since)
        manifest_codec.write_manifest(codec, _mutate(rng, parent), {}.__setitem__, encode=False)
    skip = frozenset(objects.chunk_id(c) for c in _reference(parent))
    entries = _mutate(rng, parent)
    given: dict[bytes, bytes] = {}
    mid, _, _ = manifest_codec.write_manifest(codec, entries, given.__setitem__, encode=False, skip=skip)
    expected = {objects.chunk_id(c): c for c in _reference(entries)}
    assert mid == manifest.write_manifest(entries, {}.__setitem__, encode=False)[0]
    assert {c: d for c, d in given.items() if c in expected} == {c: d for c, d in expected.items() if c not in skip}
    assert 0 < len(expected.keys() - skip) < len(expected)
