"""Agent features: conversation storage, rewind modes, tasks, per-file history, show, policy,
hooks and plugins."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import zstandard

from snapstore.errors import RefError
from snapstore.hooks import HookError
from snapstore.policy import OperationContext, Policy
from snapstore.store import Store

WORDS = (
    "the of and to in is that for it as with was on be at by this had not are but from or have "
    "an they which one you were her all she there would their we him been has when who will more "
    "no if out so said what up its about into than them can only other new some could time these"
).split()


def _message(rng: random.Random, i: int) -> dict:
    words: list[str] = []
    while len(" ".join(words)) < 1900:
        words.append(rng.choice(WORDS))
    return {"role": "user" if i % 2 == 0 else "assistant", "content": " ".join(words)}


def _logical_size(store: Store) -> int:
    total = 0
    with store.backend.read() as view:
        for table in ("chunks", "streams", "checkpoints", "log", "tags", "conversations"):
            for k, v in view.items(table):
                total += len(k) + len(v)
    return total


@pytest.fixture
def store(tmp_path: Path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "app.py").write_bytes(b"print('v1')\n")
    with Store.init(root) as s:
        yield s


def test_growing_conversation_is_stored_incrementally(store: Store):
    """150 checkpoints of a conversation growing by one ~2 KB message: <= 3x compressed final."""
    rng = random.Random(1)
    store.snapshot("base")
    before = _logical_size(store)
    messages: list[dict] = []
    for i in range(150):
        messages.append(_message(rng, i))
        store.snapshot(f"step {i}", conversation=messages)
    grown = _logical_size(store) - before
    compressed = len(zstandard.ZstdCompressor(level=3).compress(json.dumps(messages).encode()))
    ratio = grown / compressed
    print(f"conversation: store grew {grown} B for {compressed} B compressed final ({ratio:.2f}x)")
    assert ratio <= 3.0
    # And every version reads back exactly.
    assert store.conversation("latest") == messages
    assert store.conversation("latest~37") == messages[:-37]
    assert store.conversation("latest~149") == messages[:1]
    assert store.verify().ok


def test_conversation_round_trips_exactly_whatever_its_shape(store: Store):
    odd = [
        {"role": "user", "content": [{"type": "text", "text": "héllo ✓"}, {"type": "image", "data": None}]},
        {"n": 1, "f": 1.5, "big": 2**70, "nested": {"a": [1, [2, [3]]]}, "empty": {}},
        "a bare string",
        [],
    ]
    store.snapshot("odd", conversation=odd)
    assert store.conversation("latest") == odd
    # Shrinking (a rewind cut it back) then growing again still reads back exactly.
    store.snapshot("cut", conversation=odd[:1])
    store.snapshot("regrow", conversation=odd[:1] + ["new"])
    assert store.conversation("latest") == odd[:1] + ["new"]
    assert store.conversation("latest~1") == odd[:1]
    assert store.conversation("latest~2") == odd


def test_rewind_files_conversation_or_both(store: Store):
    root = Path(store.root)
    msgs = [{"role": "user", "content": "start"}]
    first = store.snapshot("one", conversation=msgs)
    (root / "app.py").write_bytes(b"print('v2')\n")
    msgs2 = msgs + [{"role": "assistant", "content": "changed app.py"}]
    store.snapshot("two", conversation=msgs2)

    only_conv = store.rewind(first.id, files=False, conversation=True)
    assert only_conv.conversation == msgs and only_conv.report is None
    assert (root / "app.py").read_bytes() == b"print('v2')\n"  # untouched

    only_files = store.rewind(first.id, files=True, conversation=False)
    assert only_files.conversation is None
    assert (root / "app.py").read_bytes() == b"print('v1')\n"
    store.undo()
    assert (root / "app.py").read_bytes() == b"print('v2')\n"

    both = store.rewind(first.id)
    assert both.conversation == msgs
    assert (root / "app.py").read_bytes() == b"print('v1')\n"
    store.undo()
    assert (root / "app.py").read_bytes() == b"print('v2')\n"


def test_rewind_to_a_checkpoint_without_conversation_touches_nothing(store: Store):
    root = Path(store.root)
    plain = store.snapshot("no conversation")
    (root / "app.py").write_bytes(b"changed\n")
    with pytest.raises(RefError, match="no conversation stored"):
        store.rewind(plain.id, files=True, conversation=True)
    assert (root / "app.py").read_bytes() == b"changed\n"
    assert store.operations() == []
    assert store.summary(plain.id)["conversation"] is None


def test_interleaved_tasks(store: Store):
    root = Path(store.root)
    conv = {"a": [], "b": []}
    for i in range(6):
        task = "a" if i % 2 == 0 else "b"
        (root / f"{task}.txt").write_bytes(f"{task} {i}\n".encode())
        conv[task].append({"role": "user", "content": f"{task} step {i}"})
        store.snapshot(f"{task}{i}", task=task, conversation=conv[task])
    assert [c.message for c in store.checkpoints(task="a")] == ["a4", "a2", "a0"]
    assert store.resolve("latest@a").message == "a4"
    assert store.resolve("latest~1@b").message == "b3"
    number = {c.message: n for n, c in store.numbered_checkpoints()}["b1"]
    assert store.resolve(f"#{number}@b").message == "b1"  # the number list shows, within its task
    with pytest.raises(RefError):
        store.resolve(f"#{number}@a")
    assert store.resolve("latest", task="b").message == "b5"
    assert store.conversation("latest@a") == conv["a"]
    assert store.conversation("latest@b") == conv["b"]
    with store.backend.read() as view:
        from snapstore.records import conversation as conversation_mod

        _, depth = conversation_mod.info(view.get, store.resolve("latest@a").conversation)
    assert depth == 2  # a delta on the task's own previous conversation, not on task b's


def test_file_history_and_restoring_one_version(store: Store):
    root = Path(store.root)
    store.snapshot("v1")
    (root / "other.txt").write_bytes(b"noise\n")
    store.snapshot("unrelated")
    (root / "app.py").write_bytes(b"print('v2')\nprint('more')\n")
    store.snapshot("v2")
    store.snapshot("nothing")
    (root / "app.py").unlink()
    store.snapshot("gone")
    (root / "app.py").write_bytes(b"back\n")
    store.snapshot("back")
    versions = store.history("app.py")
    assert [(v.checkpoint.message, v.status) for v in versions] == [
        ("v1", "A"), ("v2", "M"), ("gone", "D"), ("back", "A"),
    ]
    assert (versions[1].added, versions[1].removed) == (2, 1)
    assert versions[1].entry.size == len(b"print('v2')\nprint('more')\n")
    store.restore(versions[1].checkpoint.id, ["app.py"])
    assert (root / "app.py").read_bytes() == b"print('v2')\nprint('more')\n"
    assert (root / "other.txt").exists()


def test_summary_has_what_an_agent_ui_needs(store: Store):
    root = Path(store.root)
    store.snapshot("one")
    (root / "app.py").write_bytes(b"print('v1')\nprint('v2')\n")
    msgs = [
        {"role": "user", "content": "please add a line"},
        {"role": "assistant", "content": [{"type": "text", "text": "added it"}]},
        {"role": "tool", "content": "ok"},
    ]
    store.snapshot("two", tags=["t"], metadata={"tool": "edit"}, conversation=msgs)
    info = store.summary("latest")
    assert info["tags"] == ["t"] and info["metadata"] == {"tool": "edit"}
    assert info["conversation"] == {"messages": 3, "last_user": "please add a line", "last_assistant": "added it"}
    [change] = info["changes"]
    assert change["path"] == "app.py" and (change["added"], change["removed"]) == (1, 0)


def test_policy_scores_operations():
    p = Policy()
    assert p.decide(OperationContext(destructive=True), 1).checkpoint
    assert p.decide(OperationContext(user_initiated=True), 1).checkpoint
    assert not p.decide(OperationContext(files_affected=1), 1).checkpoint
    assert p.decide(OperationContext(files_affected=4), 1).checkpoint
    assert p.decide(OperationContext(files_affected=1), 600).checkpoint  # 10 minutes later
    assert p.decide(OperationContext(), None).checkpoint  # no checkpoint yet
    strict = Policy(threshold=5.0)
    assert not strict.decide(OperationContext(destructive=True), 1).checkpoint


def test_snapshot_if(store: Store):
    store.snapshot("first")
    n = len(store.checkpoints())
    assert store.snapshot_if(OperationContext(files_affected=1)) is None
    assert len(store.checkpoints()) == n
    cp = store.snapshot_if(OperationContext(destructive=True, tool="rm"), message="rm")
    assert cp is not None and cp.metadata["tool"] == "rm"
    assert "destructive operation" in cp.metadata["policy"]["reasons"]


def test_before_hooks_abort_cleanly_and_after_hooks_are_reported(store: Store):
    root = Path(store.root)
    store.snapshot("one")
    calls = []

    def veto(s, **kw):
        calls.append(kw)
        raise RuntimeError("not now")

    store.hooks.register("before_snapshot", veto)
    n = len(store.checkpoints(include_safety=True))
    with pytest.raises(HookError, match="not now"):
        store.snapshot("two")
    assert len(store.checkpoints(include_safety=True)) == n
    store.hooks.unregister("before_snapshot", veto)

    store.hooks.register("before_restore", veto)
    (root / "app.py").write_bytes(b"edited\n")
    with pytest.raises(HookError):
        store.restore("latest")
    assert (root / "app.py").read_bytes() == b"edited\n"
    assert len(store.checkpoints(include_safety=True)) == n and store.operations() == []
    store.hooks.unregister("before_restore", veto)

    def broken(s, **kw):
        raise ValueError("after-hook bug")

    store.hooks.register("after_snapshot", broken)
    store.hooks.register("after_restore", broken)
    cp = store.snapshot("three")
    assert any("after-hook bug" in w for w in cp.warnings)
    assert store.resolve("latest").id == cp.id  # committed all the same
    report = store.restore("latest~1")
    assert any("after-hook bug" in w for w in report.warnings)
    assert (root / "app.py").read_bytes() == b"print('v1')\n"
    seen = {}
    store.hooks.register("after_snapshot", lambda s, checkpoint: seen.setdefault("cp", checkpoint))
    store.snapshot("four")
    assert seen["cp"].message == "four"


def test_plugins_from_entry_points(tmp_path: Path):
    site = tmp_path / "site"
    pkg = site / "snapplug"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "def plugin(store):\n"
        "    def tag(store, checkpoint):\n"
        "        open(store.root + '/../plugin-saw.txt', 'w').write(checkpoint.message)\n"
        "    store.hooks.register('after_snapshot', tag)\n"
    )
    dist = site / "snapplug-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: snapplug\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[snapstore.plugins]\nsnapplug = snapplug:plugin\n")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f").write_bytes(b"x")
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(site)!r})
        from snapstore import Store
        s = Store.init({str(tree)!r})
        s.snapshot("seen by the plugin")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "SNAPSTORE_NO_PLUGINS"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "plugin-saw.txt").read_text() == "seen by the plugin"


def test_cli_restore_modes(tmp_path: Path):
    from helpers import run_snapstore

    root = tmp_path / "p"
    root.mkdir()
    (root / "app.py").write_bytes(b"v1\n")
    conv = tmp_path / "conv.json"
    msgs = [{"role": "user", "content": "hi"}]
    conv.write_text(json.dumps(msgs))
    assert run_snapstore("init", "-q", cwd=root).returncode == 0
    assert run_snapstore("snapshot", "-q", "--conversation", str(conv), cwd=root).returncode == 0
    (root / "app.py").write_bytes(b"v2\n")
    assert run_snapstore("snapshot", "-q", cwd=root).returncode == 0

    out = tmp_path / "out.json"
    proc = run_snapstore("restore", "latest~1", "--conversation-only", "-o", str(out), cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text()) == msgs
    assert (root / "app.py").read_bytes() == b"v2\n"

    proc = run_snapstore("restore", "latest~1", "--both", "-o", "-", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == msgs  # stdout holds only the JSON; the report is on stderr
    assert (root / "app.py").read_bytes() == b"v1\n"

    proc = run_snapstore("restore", "latest", "--conversation-only", cwd=root)
    assert proc.returncode == 4 and b"no conversation stored" in proc.stderr

    proc = run_snapstore("log", "app.py", "--json", cwd=root)
    assert proc.returncode == 0
    assert [v["status"] for v in json.loads(proc.stdout)["versions"]] == ["A", "M"]
