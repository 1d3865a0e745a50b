"""Stateful property test: random sequences of edit, snapshot, restore, partial restore, undo
and diff against a simple model (a dict path -> content), on a real tree and LMDB store.

After every step the real tree's files equal the model.  Restore makes the model equal to the
checkpoint's (over the selected paths); undo puts back the state the newest operation started
from (over the same paths), and is itself an operation, as the store documents.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from torture_tally import FULL, record

from snapstore.store import Store
from snapstore.testing import Exec, read_tree

# Paths never nest inside each other's names, so a path is always a file or absent.
PATHS = ["a.txt", "b.txt", "d/c.txt", "d/e/f.txt", "g/h.bin", "run.sh"]
CONTENTS = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"", b"same\n", b"SAME\n"]),  # same size, different bytes: racy-file bait
    st.binary(min_size=9000, max_size=40_000),  # several chunks
)
STEPS = 0
FAILED = 0


def _files(tree: dict) -> dict[str, bytes | Exec]:
    return {os.fsdecode(k): v for k, v in tree.items() if isinstance(v, bytes | Exec)}


class SnapstoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="snapstore-model-")
        self.root = os.path.join(self.dir, "tree")
        os.mkdir(self.root)
        self.store = Store.init(self.root)
        self.model: dict[str, bytes | Exec] = {}
        self.checkpoints: dict[str, dict] = {}  # id -> model at snapshot time
        self.ops: list[tuple[dict, list[str] | None]] = []  # newest last: (before, paths)

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _path(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    @rule(path=st.sampled_from(PATHS), data=CONTENTS, exe=st.booleans())
    def write(self, path, data, exe):
        p = self._path(path)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
        os.chmod(p, 0o755 if exe else 0o644)
        self.model[path] = Exec(data) if exe else data

    @rule(path=st.sampled_from(PATHS))
    def delete(self, path):
        if path in self.model:
            os.unlink(self._path(path))
            del self.model[path]

    @rule(message=st.text(max_size=8))
    def snapshot(self, message):
        cp = self.store.snapshot(message)
        self.checkpoints[cp.id] = dict(self.model)

    @staticmethod
    def _apply(current: dict, target: dict, paths: list[str] | None) -> dict:
        def sel(p: str) -> bool:
            return paths is None or any(p == w or p.startswith(w + "/") for w in paths)

        out = {p: v for p, v in current.items() if not sel(p)}
        out.update({p: v for p, v in target.items() if sel(p)})
        return out

    @precondition(lambda self: self.checkpoints)
    @rule(data=st.data(), partial=st.booleans())
    def restore(self, data, partial):
        cid = data.draw(st.sampled_from(sorted(self.checkpoints)))
        paths = None
        if partial:
            paths = data.draw(st.lists(st.sampled_from(PATHS + ["d", "g"]), min_size=1, max_size=3))
        self.store.restore(cid, paths)
        before = dict(self.model)
        self.model = self._apply(self.model, self.checkpoints[cid], paths)
        self.ops.append((before, paths))

    @precondition(lambda self: self.ops)
    @rule()
    def undo(self):
        self.store.undo()
        before, paths = self.ops[-1]
        now = dict(self.model)
        self.model = self._apply(self.model, before, paths)
        self.ops.append((now, paths))

    @precondition(lambda self: self.checkpoints)
    @rule(data=st.data())
    def diff(self, data):
        cid = data.draw(st.sampled_from(sorted(self.checkpoints)))
        old = self.checkpoints[cid]
        expected = {p for p in set(old) | set(self.model) if old.get(p) != self.model.get(p)}
        got = {os.fsdecode(c.path) for c in self.store.diff(cid) if os.fsdecode(c.path) in PATHS}
        assert got == expected, (got, expected)
        other = data.draw(st.sampled_from(sorted(self.checkpoints)))
        new = self.checkpoints[other]
        expected2 = {p for p in set(old) | set(new) if old.get(p) != new.get(p)}
        got2 = {os.fsdecode(c.path) for c in self.store.diff(cid, other) if os.fsdecode(c.path) in PATHS}
        assert got2 == expected2, (got2, expected2)

    @invariant()
    def tree_equals_model(self):
        global STEPS
        STEPS += 1
        assert _files(read_tree(self.root)) == self.model


def test_model_and_real_tree_never_disagree():
    global STEPS
    STEPS = 0
    config = settings(
        max_examples=150 if FULL else 25, stateful_step_count=30 if FULL else 20, deadline=None,
    )
    try:
        run_state_machine_as_test(SnapstoreModel, settings=config)
    except BaseException:
        record("model (stateful)", STEPS, 1)
        raise
    record("model (stateful)", STEPS, 0)
