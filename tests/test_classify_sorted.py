"""worktree.classify_sorted (one merge pass over the stat cache in key order) gives exactly what
classify over the cache as a dict gives, plus the stale keys snapshot used to compute."""

from __future__ import annotations

import random

import pytest

from snapstore.ops.snapshot.incremental import stale_cache_keys as _stale_cache_keys
from snapstore.records.manifest import DIR, EXEC, FILE, SYMLINK, UNREADABLE
from snapstore.tree import statcache, worktree
from snapstore.tree.scan import Found, Stat

NOW = 6 * 10**18  # every cached read is long after the files' times (5e18 ns): none is racy


def _stat(size: int, time_ns: int, ino: int, mode: int) -> Stat:
    return Stat(st_mode=mode, st_ino=ino, st_size=size, st_mtime_ns=time_ns, st_ctime_ns=time_ns)


def _tree(rng: random.Random) -> tuple[list[Found], dict[bytes, bytes]]:
    names = [b"a", b"a.txt", b"a0", b"b", b"\xff\xfe", b"z" * 300, b"d\x01"]
    paths = set()
    for _ in range(rng.randrange(0, 60)):
        depth = rng.randrange(1, 4)
        paths.add(b"/".join(rng.choice(names) + str(rng.randrange(3)).encode() for _ in range(depth)))
    found = []
    cache: dict[bytes, bytes] = {}
    for i, path in enumerate(sorted(paths)):
        kind = rng.choice([FILE, FILE, FILE, EXEC, SYMLINK, DIR, UNREADABLE])
        mode = {FILE: 0o100644, EXEC: 0o100755, SYMLINK: 0o120777, DIR: 0o40755, UNREADABLE: 0}[kind]
        if rng.random() < 0.1:
            mode |= 0o4000  # setuid: never recorded
        st = None if kind == UNREADABLE else _stat(i * 10, 5 * 10**18 + i, 1000 + i, mode)
        found.append(Found(path, kind, st, b"target" if kind == SYMLINK else b""))
        roll = rng.random()
        if st is not None and roll < 0.7:  # cached, valid or not
            size = st.st_size + (1 if roll < 0.1 else 0)  # a changed size: a miss
            value = statcache.encode(_stat(size, st.st_mtime_ns, st.st_ino, st.st_mode), bytes([i % 256]) * 32, NOW)
            cache[statcache.key(path)] = value
        elif roll < 0.75:
            cache[statcache.key(path)] = b"\xc1damaged"
    for _ in range(rng.randrange(0, 8)):  # keys no found path has: stale
        stale = rng.choice(names) + b"/gone" + str(rng.randrange(100)).encode()
        cache.setdefault(statcache.key(stale), b"\x90")
    if rng.random() < 0.3:
        cache[statcache.long_key(b"q" * 600)] = b"\x90"  # a long path that is gone
    return found, cache


@pytest.mark.parametrize("seed", range(200))
def test_merge_pass_equals_the_dict_classify(seed):
    rng = random.Random(seed)
    found, cache = _tree(rng)
    want_entries, want_misses = worktree.classify(found, cache)
    want_stale = _stale_cache_keys(cache, found)
    entries, misses, stale = worktree.classify_sorted(found, sorted(cache.items()))
    assert entries == want_entries
    assert list(entries) == list(want_entries)  # same order
    assert misses == want_misses
    assert sorted(stale) == sorted(want_stale)


def test_long_paths_use_their_hashed_key():
    long = b"d/" + b"x" * 600
    st = _stat(3, 10, 7, 0o100644)
    found = [Found(b"a", FILE, st), Found(long, FILE, st)]
    sid = b"s" * 32
    cache = {statcache.key(long): statcache.encode(st, sid, NOW)}
    entries, misses, stale = worktree.classify_sorted(found, sorted(cache.items()))
    assert entries[long].ref == sid and misses == [found[0]] and stale == []
