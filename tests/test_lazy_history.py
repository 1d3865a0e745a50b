"""Resolving a reference reads only the records it reaches, whatever the length of history."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapstore.records import history as history_mod
from snapstore.store import Store
from snapstore.testing import build_tree

N = 120


@pytest.fixture(scope="module")
def long_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("h") / "t"
    build_tree(root, {"f.txt": b"0\n"})
    with Store.init(root) as s:
        for i in range(N):
            (root / "f.txt").write_bytes(b"%d\n" % i)
            s.snapshot(f"step {i}", task="even" if i % 2 == 0 else "odd", tags=["v50"] if i == 50 else ())
    return root


@pytest.fixture
def parsed(monkeypatch):
    calls = []
    real = history_mod.parse_record

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(history_mod, "parse_record", counting)
    return calls


@pytest.mark.parametrize(
    "ref, message, most",
    [
        ("latest", f"step {N - 1}", 1),
        ("latest~5", f"step {N - 6}", 6),
        ("#3", "step 2", 1),  # a number is read directly, however old
        ("v50", "step 50", 1),
        ("latest~1@even", f"step {N - 4}", 4),
        (":/step 110", "step 110", N - 110),
    ],
)
def test_a_reference_reads_what_it_reaches(long_store: Path, parsed, ref, message, most):
    with Store.open(long_store) as s:
        cp = s.resolve(ref)
    assert cp.message == message
    assert len(parsed) <= most, (ref, len(parsed))


def test_an_id_prefix_reads_its_range_only(long_store: Path, parsed):
    with Store.open(long_store) as s:
        target = s.resolve("latest~60")
        parsed.clear()
        assert s.resolve(target.id[:10]).id == target.id
    assert len(parsed) <= 2


def test_list_with_a_limit_reads_the_rows_shown(long_store: Path, parsed):
    with Store.open(long_store) as s:
        rows = s.numbered_checkpoints(limit=3)
    assert [n for n, _ in rows] == [N, N - 1, N - 2]
    assert len(parsed) <= 3


def test_tags_come_with_the_resolved_checkpoint(long_store: Path):
    with Store.open(long_store) as s:
        assert s.resolve("v50").tags == ("v50",)
        assert s.resolve("latest").tags == ()
