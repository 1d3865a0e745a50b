"""Checkpoint references: latest, latest~N, #N, tags, hex prefixes, full ids, and the errors."""

from __future__ import annotations

import pytest

from snapstore.errors import CorruptError, RefError, UsageError
from snapstore.records import refs
from snapstore.store import Store
from snapstore.testing import build_tree


@pytest.fixture
def three(tree):
    """An in-memory store with three checkpoints (oldest first), the middle one tagged."""
    store = Store.in_memory(tree)
    cps = []
    for i, tags in enumerate([(), ("v1", "release/1.0"), ()]):
        build_tree(tree, {"f": b"version %d" % i})
        cps.append(store.snapshot(f"step {i}", tags=tags, task="t-even" if i % 2 == 0 else "t-odd"))
    return store, cps


def test_latest_and_latest_n(three):
    store, (c0, c1, c2) = three
    assert store.resolve("latest").id == c2.id
    assert store.resolve("latest~0").id == c2.id
    assert store.resolve("latest~1").id == c1.id
    assert store.resolve("latest~2").id == c0.id
    assert store.read_bytes("latest~2", "f") == b"version 0"


def test_numbers_are_places_in_the_log_and_never_move(three, tree):
    store, (c0, c1, c2) = three
    assert [store.resolve(f"#{n}").id for n in (1, 2, 3)] == [c0.id, c1.id, c2.id]
    assert [(n, c.id) for n, c in store.numbered_checkpoints()] == [(3, c2.id), (2, c1.id), (1, c0.id)]
    build_tree(tree, {"f": b"newer"})
    store.snapshot("newer")  # a number read before a new checkpoint still names the same one
    assert [store.resolve(f"#{n}").id for n in (1, 2, 3)] == [c0.id, c1.id, c2.id]
    assert store.resolve("#4").message == "newer"


def test_tags(three):
    store, (_, c1, _) = three
    assert store.resolve("v1").id == c1.id
    assert store.resolve("release/1.0").id == c1.id
    assert set(store.resolve("v1").tags) == {"v1", "release/1.0"}


def test_tag_moves_to_the_newest_checkpoint(three, tree):
    store, (_, c1, c2) = three
    build_tree(tree, {"f": b"newer"})
    c3 = store.snapshot("newer", tags=["v1"])
    assert store.resolve("v1").id == c3.id
    assert store.resolve("release/1.0").id == c1.id


def test_hex_prefixes_and_full_ids(three):
    store, cps = three
    for c in cps:
        assert store.resolve(c.id).id == c.id
        assert store.resolve(c.id.upper()).id == c.id
        assert store.resolve(c.short_id).id == c.id
        unique = next(n for n in range(4, 65) if sum(o.id.startswith(c.id[:n]) for o in cps) == 1)
        assert store.resolve(c.id[:unique]).id == c.id


def test_task_scoped_refs(three):
    store, (c0, c1, c2) = three
    assert store.resolve("latest", task="t-odd").id == c1.id
    assert store.resolve("latest~1", task="t-even").id == c0.id
    assert store.resolve("#1", task="t-even").id == c0.id
    assert store.resolve("#3@t-even").id == c2.id
    with pytest.raises(RefError, match="not a checkpoint of task 't-even'"):
        store.resolve("#2", task="t-even")
    with pytest.raises(RefError):
        store.resolve("latest~1", task="t-odd")


@pytest.mark.parametrize(
    "ref",
    ["", "   ", "nope", "latest~3", "latest~99", "#0", "#4", "#-1", "latest~", "abc", "a1",
     "0000000000000000", "g123", "latest~1x"],
)  # fmt: skip
def test_bad_refs_raise_ref_error(three, ref):
    store, _ = three
    with pytest.raises(RefError) as info:
        store.resolve(ref)
    assert info.value.exit_code == 4


def test_too_short_prefix_says_so(three):
    store, (c0, _, _) = three
    with pytest.raises(RefError, match="at least 4"):
        store.resolve(c0.id[:3])


def test_no_checkpoints_yet(tree):
    store = Store.in_memory(tree)
    with pytest.raises(RefError, match="no checkpoints"):
        store.resolve("latest")


def _fake(cp, hex_id: str):
    return cp._replace(id=hex_id)


def test_ambiguous_prefix(three):
    _, (c0, c1, _) = three
    a = _fake(c0, "abcd1" + "0" * 59)
    b = _fake(c1, "abcd2" + "0" * 59)
    with pytest.raises(RefError, match="ambiguous"):
        refs.resolve("abcd", [a, b], {})
    assert refs.resolve("abcd1", [a, b], {}) is a
    assert refs.resolve("ABCD2", [a, b], {}) is b


def test_tag_wins_over_hex_prefix_and_dangling_tag_is_an_error(three):
    _, (c0, c1, _) = three
    a = _fake(c0, "beef" + "0" * 60)
    b = _fake(c1, "cafe" + "0" * 60)
    # "beef" is a valid hex prefix of a's id and a tag naming b: the tag wins.  (The store
    # refuses such tags on write; a store written by another tool may still hold one.)
    assert refs.resolve("beef", [a, b], {"beef": b.id}) is b
    assert refs.resolve("beef", [a, b], {}) is a
    with pytest.raises(RefError, match="no longer exists"):
        refs.resolve("gone", [a], {"gone": "f" * 64})


@pytest.mark.parametrize("tag", ["latest", "latest~1", "abcd", "deadbeef", "-x", "a b", "", "x" * 101])
def test_tags_that_would_be_ambiguous_are_refused(tree, tag):
    store = Store.in_memory(tree)
    with pytest.raises(UsageError):
        store.snapshot("x", tags=[tag])
    assert store.checkpoints() == []


def test_search_ref_names_the_newest_matching_message(three):
    store, (c0, c1, c2) = three
    assert store.resolve(":/step").id == c2.id
    assert store.resolve(":/step 1").id == c1.id
    assert store.resolve(":/ep 0").id == c0.id  # a substring, anywhere in the message
    with pytest.raises(RefError, match="no checkpoint has a message containing 'Step'"):
        store.resolve(":/Step")  # case-sensitive, like git
    with pytest.raises(RefError, match="give the text"):
        store.resolve(":/")


def test_search_ref_is_scoped_by_task(three):
    store, (c0, c1, c2) = three
    assert store.resolve(":/step@t-odd").id == c1.id
    assert store.resolve(":/step", task="t-even").id == c2.id
    assert store.resolve(":/step 0@t-even").id == c0.id
    with pytest.raises(RefError, match="in task 't-odd'"):
        store.resolve(":/step 2@t-odd")


def test_search_ref_skips_safety_checkpoints_and_allows_at_with_a_task(tree):
    store = Store.in_memory(tree)
    build_tree(tree, {"f": b"1"})
    first = store.snapshot("mail user@host", task="t")
    build_tree(tree, {"f": b"2"})
    store.snapshot("other", task="t")
    store.restore(first.id)  # records a safety checkpoint "before restore of ..."
    assert store.resolve(":/mail user@host@t").id == first.id
    with pytest.raises(RefError, match="no checkpoint"):
        store.resolve(":/before restore")


def test_damaged_target_of_a_tag_is_corrupt_not_missing(three):
    _, (c0, _, _) = three
    a = _fake(c0, "beef" + "0" * 60)
    gone = "f" * 64
    why = {gone: "checkpoint ffff is damaged"}.get
    with pytest.raises(CorruptError, match="names a damaged checkpoint"):
        refs.resolve("t", [a], {"t": gone}, damage=why)
    with pytest.raises(CorruptError, match="damaged"):
        refs.resolve(gone, [a], {}, damage=why)
    with pytest.raises(RefError, match="no longer exists"):
        refs.resolve("t", [a], {"t": "e" * 64}, damage=why)
