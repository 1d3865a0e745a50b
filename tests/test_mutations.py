"""The mutation list (tests/mutations/mutations.toml) still matches the code: every mutation's
old text occurs exactly once in its file, and its test files exist.  ``make mutate`` applies
them; this keeps a refactor from silently turning a mutation into a no-op."""

from __future__ import annotations

from pathlib import Path

from tests.mutations import run


def test_every_mutation_applies_to_the_code_as_it_is():
    mutations = run.load()
    assert len(mutations) >= 15
    assert run.problems(mutations) == []


def test_a_stale_mutation_is_reported(tmp_path: Path):
    (tmp_path / "m.py").write_text("x = 1\nx = 1\n")
    stale = [
        run.Mutation("A", "b", "m.py", "x = 1", "x = 2", ("m.py",)),
        run.Mutation("B", "b", "m.py", "y = 1", "y = 2", ("nope.py",)),
        run.Mutation("B", "b", "gone.py", "y", "y", ()),
    ]
    said = run.problems(stale, tmp_path)
    assert any("A: its old text occurs 2 times" in s for s in said)
    assert any("B: its old text occurs 0 times" in s for s in said)
    assert any("B: no test file nope.py" in s for s in said)
    assert any("the id is used twice" in s for s in said)
    assert any("gone.py" in s for s in said)
