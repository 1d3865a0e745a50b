"""Selective revert through the Store: a real LMDB store, a real tree, real checkpoints.

The law (issue 14): with non-overlapping, non-adjacent line edits by the agent and by the user,
recorded in any order, reverting the agent's checkpoints leaves exactly base + the user's edits;
overlapping edits are conflicts and nothing changes; revert then undo gives the tree back byte
for byte.  Then the cases: binary, deleted and re-created, renamed, modes, empty, CRLF, ...
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapstore.errors import ConflictError, RefError, UsageError
from snapstore.store import Store

TASK = "session-1"


def snap(store: Store, message: str, actor: str, task: str = TASK):
    return store.snapshot(message, task=task, metadata={"actor": actor})


def tree_state(root: Path) -> dict[str, tuple[str, bytes, int]]:
    """Every path below ``root`` (the store left out): kind, bytes or link target, mode."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".snapstore"]
        for name in dirs + files:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            st_ = os.lstat(full)
            if stat.S_ISLNK(st_.st_mode):
                out[rel] = ("link", os.fsencode(os.readlink(full)), 0)
            elif stat.S_ISDIR(st_.st_mode):
                out[rel] = ("dir", b"", stat.S_IMODE(st_.st_mode))
            else:
                out[rel] = ("file", Path(full).read_bytes(), stat.S_IMODE(st_.st_mode))
    return out


def store_state(store: Store):
    return (
        [c.id for c in store.checkpoints(include_safety=True)],
        [o.seq for o in store.operations()],
    )


# -- the law ------------------------------------------------------------------------------------


@st.composite
def sessions(draw):
    """Base lines, an edit per line (owner agent/user/None, kind replace/delete/insert) with a
    free line between edits of different owners, the order in which groups of edits are
    checkpointed, line endings, and whether the last line has its newline."""
    n = draw(st.integers(min_value=3, max_value=24))
    owners: list[str | None] = []
    for i in range(n):
        o = draw(st.sampled_from(["agent", "user", None, None]))
        if o is not None and i > 0 and owners[-1] not in (None, o):
            o = None  # never right next to the other actor's edit
        owners.append(o)
    kinds = [draw(st.sampled_from(["replace", "delete", "insert"])) for _ in range(n)]
    edited = [i for i, o in enumerate(owners) if o is not None]
    order = draw(st.permutations(edited))
    # Cut the edits into checkpoints; each group holds one owner's edits only.
    groups: list[tuple[str, list[int]]] = []
    for i in order:
        if groups and groups[-1][0] == owners[i] and draw(st.booleans()):
            groups[-1][1].append(i)
        else:
            groups.append((owners[i], [i]))  # type: ignore[arg-type]
    newline = draw(st.sampled_from([b"\n", b"\r\n"]))
    final_newline = draw(st.booleans())
    if not final_newline and kinds[-1] == "delete":
        # Deleting the last line of a file without a final newline takes the newline off the
        # line before: an edit of that line too (git sees it so as well), adjacent to others.
        kinds[-1] = "replace"
    unrecorded_tail = draw(st.booleans())  # the user's last edits never checkpointed
    return n, owners, kinds, groups, newline, final_newline, unrecorded_tail


def render(n, kinds, applied, newline, final_newline, owners) -> bytes:
    lines = []
    for i in range(n):
        line = b"line %d" % i
        if i not in applied:
            lines.append(line)
        elif kinds[i] == "replace":
            lines.append(b"%s edit of %d" % (owners[i].encode(), i))
        elif kinds[i] == "insert":
            lines += [line, b"%s insert after %d" % (owners[i].encode(), i)]
        # delete: nothing
    text = newline.join(lines)
    return text + newline if final_newline and lines else text


@settings(max_examples=20)
@given(sessions())
def test_reverting_the_agent_keeps_exactly_the_user_s_edits_and_undo_gives_the_tree_back(case):
    n, owners, kinds, groups, newline, final_newline, unrecorded_tail = case
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        f = root / "f.txt"

        def write(applied):
            f.write_bytes(render(n, kinds, applied, newline, final_newline, owners))

        write(set())
        with Store.init(root) as store:
            snap(store, "base", "user")
            applied: set[int] = set()
            for k, (owner, idx) in enumerate(groups):
                applied |= set(idx)
                write(applied)
                last = k == len(groups) - 1
                if not (last and owner == "user" and unrecorded_tail):
                    snap(store, f"{owner} {k}", owner)
            if not any(o == "agent" for o, _ in groups):
                with pytest.raises(RefError):
                    store.revert(task=TASK, actor="agent")
                return
            before = tree_state(root)
            report = store.revert(task=TASK, actor="agent")
            user_edits = {i for i, o in enumerate(owners) if o == "user"}
            assert f.read_bytes() == render(n, kinds, user_edits, newline, final_newline, owners)
            assert not report.conflicted
            store.undo()
            assert tree_state(root) == before


@settings(max_examples=15)
@given(
    n=st.integers(min_value=2, max_value=12),
    data=st.data(),
    user_first=st.booleans(),
    record_user=st.booleans(),
)
def test_overlapping_or_adjacent_edits_since_are_conflicts_and_nothing_changes(n, data, user_first, record_user):
    agent_line = data.draw(st.integers(min_value=0, max_value=n - 1))
    user_line = data.draw(st.integers(min_value=max(0, agent_line - 1), max_value=min(n - 1, agent_line + 1)))
    base = [b"line %d\n" % i for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        f = root / "f.txt"
        f.write_bytes(b"".join(base))
        with Store.init(root) as store:
            snap(store, "base", "user")
            lines = list(base)
            for who in (["user", "agent"] if user_first else ["agent", "user"]):
                i = user_line if who == "user" else agent_line
                lines[i] = b"%s %d\n" % (who.encode(), i)
                f.write_bytes(b"".join(lines))
                if who == "agent" or record_user or user_first:  # (only the last edit may be unrecorded)
                    snap(store, who, who)
            before, records = tree_state(root), store_state(store)
            if user_first:
                # The agent's checkpoint is the newest and nothing changed since: it simply goes
                # back, to the user's version (even of the very line the agent rewrote).
                store.revert(task=TASK, actor="agent")
                expected = list(base)
                expected[user_line] = b"user %d\n" % user_line
                assert f.read_bytes() == b"".join(expected)
                return
            # The user edited the same or the next line after the agent: a conflict (like git,
            # adjacent changes are not merged silently), listed, and nothing changes.
            with pytest.raises(ConflictError) as err:
                store.revert(task=TASK, actor="agent")
            assert "f.txt: line" in str(err.value)
            assert tree_state(root) == before
            assert store_state(store) == records


# -- cases ---------------------------------------------------------------------------------------


def test_one_checkpoint_vs_its_parent_and_later_user_edits_stay(tree: Path, store: Store):
    (tree / "a.txt").write_text("1\n2\n3\n4\n5\n")
    snap(store, "base", "user")
    (tree / "a.txt").write_text("1\nTWO\n3\n4\n5\n")
    cp = snap(store, "agent edit", "agent")
    (tree / "a.txt").write_text("1\nTWO\n3\n4\nFIVE\n")
    snap(store, "user edit", "user")
    report = store.revert(cp.id)
    assert (tree / "a.txt").read_text() == "1\n2\n3\n4\nFIVE\n"
    assert [os.fsdecode(p) for p in report.paths("merged")] == ["a.txt"]
    doc = report.to_json()
    assert doc["merged"] == ["a.txt"] and doc["op"] is not None and doc["safety_checkpoint"]
    target = store.resolve("latest")
    assert target.id == doc["target"] and target.metadata["revert_of"] == {"checkpoint": cp.id}
    assert target.message.startswith("revert of checkpoint")


def test_binary_file_whole_when_unchanged_since_conflict_otherwise(tree: Path, store: Store):
    (tree / "b.bin").write_bytes(b"\x00\x01old")
    (tree / "c.bin").write_bytes(b"\x00\x01old")
    snap(store, "base", "user")
    (tree / "b.bin").write_bytes(b"\x00\x01agent")
    (tree / "c.bin").write_bytes(b"\x00\x01agent")
    cp = snap(store, "agent", "agent")
    (tree / "c.bin").write_bytes(b"\x00\x01user")
    with pytest.raises(ConflictError) as err:
        store.revert(cp.id)
    assert "c.bin: whole file" in str(err.value) and "b.bin" not in str(err.value)
    assert (tree / "b.bin").read_bytes() == b"\x00\x01agent"
    report = store.revert(cp.id, paths=["b.bin"])
    assert (tree / "b.bin").read_bytes() == b"\x00\x01old"
    assert (tree / "c.bin").read_bytes() == b"\x00\x01user"
    assert [os.fsdecode(p) for p in report.paths("reverted")] == ["b.bin"]
    store.revert(cp.id, paths=["c.bin"], conflicts="theirs")
    assert (tree / "c.bin").read_bytes() == b"\x00\x01old"


def test_added_file_removed_deleted_file_back_unless_recreated(tree: Path, store: Store):
    (tree / "gone.txt").write_text("keep me\n")
    (tree / "again.txt").write_text("original\n")
    (tree / "dir").mkdir()
    (tree / "dir" / "inner.txt").write_text("inner\n")
    (tree / "empty_dir").mkdir()
    snap(store, "base", "user")
    (tree / "empty_dir").rmdir()
    (tree / "new_empty_dir").mkdir()
    (tree / "gone.txt").unlink()
    (tree / "again.txt").unlink()
    (tree / "dir" / "inner.txt").unlink()
    (tree / "dir").rmdir()
    (tree / "new.txt").write_text("agent's\n")
    (tree / "newdir").mkdir()
    (tree / "newdir" / "x.txt").write_text("x\n")
    cp = snap(store, "agent", "agent")
    (tree / "again.txt").write_text("the user's own\n")
    with pytest.raises(ConflictError, match="again.txt"):
        store.revert(cp.id)
    report = store.revert(cp.id, conflicts="ours")
    assert (tree / "gone.txt").read_text() == "keep me\n"
    assert (tree / "dir" / "inner.txt").read_text() == "inner\n"
    assert (tree / "again.txt").read_text() == "the user's own\n"
    assert not (tree / "new.txt").exists() and not (tree / "newdir").exists()
    assert (tree / "empty_dir").is_dir() and not (tree / "new_empty_dir").exists()
    assert b"again.txt" in report.paths("untouched")


def test_added_file_edited_since_is_a_conflict_and_a_dir_with_user_files_stays(tree: Path, store: Store):
    (tree / "keep.txt").write_text("k\n")
    snap(store, "base", "user")
    (tree / "made.txt").write_text("agent\n")
    (tree / "pkg").mkdir()
    (tree / "pkg" / "mod.py").write_text("agent\n")
    cp = snap(store, "agent", "agent")
    (tree / "made.txt").write_text("agent\nuser\n")
    (tree / "pkg" / "user.py").write_text("mine\n")
    with pytest.raises(ConflictError, match="made.txt: whole file"):
        store.revert(cp.id)
    report = store.revert(cp.id, paths=["pkg"])
    assert not report.warnings  # the directory stays because the target keeps it, not by luck
    assert not (tree / "pkg" / "mod.py").exists()
    assert (tree / "pkg" / "user.py").read_text() == "mine\n"


def test_rename_is_followed_with_the_user_s_edits(tree: Path, store: Store):
    (tree / "old_name.py").write_text("a\nb\nc\nd\ne\n")
    snap(store, "base", "user")
    os.rename(tree / "old_name.py", tree / "new_name.py")
    cp = snap(store, "agent renames", "agent")
    (tree / "new_name.py").write_text("a\nb\nc\nd\nE (user)\n")
    report = store.revert(cp.id)
    assert not (tree / "new_name.py").exists()
    assert (tree / "old_name.py").read_text() == "a\nb\nc\nd\nE (user)\n"
    store.undo()
    assert (tree / "new_name.py").read_text() == "a\nb\nc\nd\nE (user)\n"
    assert not (tree / "old_name.py").exists()
    assert report.outcomes


def test_mode_changes_revert_too_and_the_user_s_mode_stays(tree: Path, store: Store):
    (tree / "tool.sh").write_text("echo 1\necho 2\necho 3\necho 4\n")
    os.chmod(tree / "tool.sh", 0o744)  # exec for the owner only: kept exactly through a merge
    for name in ("run.sh", "both.sh", "private.txt"):
        (tree / name).write_text("echo 1\necho 2\necho 3\necho 4\n")
        os.chmod(tree / name, 0o644)
    snap(store, "base", "user")
    os.chmod(tree / "run.sh", 0o755)
    os.chmod(tree / "both.sh", 0o755)
    (tree / "private.txt").write_text("echo 1\nagent\necho 3\necho 4\n")
    (tree / "tool.sh").write_text("agent\necho 2\necho 3\necho 4\n")
    cp = snap(store, "agent", "agent")
    (tree / "tool.sh").write_text("agent\necho 2\necho 3\nuser\n")
    (tree / "both.sh").write_text("echo 1\necho 2\necho 3\nuser\n")  # content by the user: mode still the agent's
    os.chmod(tree / "private.txt", 0o600)  # the user's mode, the agent's content
    store.revert(cp.id)
    assert stat.S_IMODE(os.stat(tree / "run.sh").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tree / "both.sh").st_mode) == 0o644
    assert (tree / "both.sh").read_text() == "echo 1\necho 2\necho 3\nuser\n"
    assert stat.S_IMODE(os.stat(tree / "private.txt").st_mode) == 0o600
    assert (tree / "tool.sh").read_text() == "echo 1\necho 2\necho 3\nuser\n"
    assert stat.S_IMODE(os.stat(tree / "tool.sh").st_mode) == 0o744
    assert (tree / "private.txt").read_text() == "echo 1\necho 2\necho 3\necho 4\n"


def test_empty_files_both_ways(tree: Path, store: Store):
    (tree / "was_empty").write_bytes(b"")
    (tree / "emptied").write_bytes(b"a\nb\n")
    snap(store, "base", "user")
    (tree / "was_empty").write_bytes(b"agent\n")
    (tree / "emptied").write_bytes(b"")
    cp = snap(store, "agent", "agent")
    store.revert(cp.id)
    assert (tree / "was_empty").read_bytes() == b""
    assert (tree / "emptied").read_bytes() == b"a\nb\n"


def test_crlf_and_no_final_newline_kept_byte_for_byte(tree: Path, store: Store):
    (tree / "w.txt").write_bytes(b"a\r\nb\r\nc\r\nd\r\ne")
    snap(store, "base", "user")
    (tree / "w.txt").write_bytes(b"A\r\nb\r\nc\r\nd\r\ne")
    cp = snap(store, "agent", "agent")
    (tree / "w.txt").write_bytes(b"A\r\nb\r\nc\r\nd\r\nE")
    store.revert(cp.id)
    assert (tree / "w.txt").read_bytes() == b"a\r\nb\r\nc\r\nd\r\nE"


def test_markers_mode_writes_diff3_markers_reports_lines_and_undo_removes_them(tree: Path, store: Store):
    (tree / "m.txt").write_bytes(b"1\n2\n3\n4\n5\n6\n")
    snap(store, "base", "user")
    (tree / "m.txt").write_bytes(b"1\n2\nagent\n4\n5\n6\n")
    cp = snap(store, "agent", "agent")
    (tree / "m.txt").write_bytes(b"1\n2\nuser\n4\n5\n6\n")
    before = tree_state(tree)
    report = store.revert(cp.id, conflicts="markers")
    data = (tree / "m.txt").read_bytes()
    assert data.startswith(b"1\n2\n<<<<<<< ") and b"\nuser\n|||||||" in data and b"=======\n3\n>>>>>>>" in data
    [conflict] = report.to_json()["conflicted"]
    assert conflict["path"] == "m.txt" and conflict["lines"] == [[3, 3]]
    store.undo()
    assert tree_state(tree) == before


def test_dry_run_changes_nothing_and_shows_the_diff(tree: Path, store: Store):
    (tree / "d.txt").write_text("1\n2\n3\n4\n")
    snap(store, "base", "user")
    (tree / "d.txt").write_text("1\nagent\n3\n4\n")
    (tree / "added.txt").write_text("x\n")
    cp = snap(store, "agent", "agent")
    (tree / "user.txt").write_text("not checkpointed yet\n")
    before, records = tree_state(tree), store_state(store)
    report = store.revert(cp.id, dry_run=True)
    assert tree_state(tree) == before and store_state(store) == records
    assert report.dry_run and report.safety is None and report.op_seq is None
    assert b"-agent\n+2\n" in report.diffs[b"d.txt"]
    assert b"+++ /dev/null" in report.diffs[b"added.txt"]


def test_range_is_one_step_a_to_b(tree: Path, store: Store):
    (tree / "r.txt").write_text("1\n2\n3\n4\n5\n6\n7\n")
    a = snap(store, "base", "user")
    (tree / "r.txt").write_text("1\nX\n3\n4\n5\n6\n7\n")
    snap(store, "agent 1", "agent")
    (tree / "r.txt").write_text("1\n2\n3\nY\n5\n6\n7\n")  # line 2 changed back inside the range
    b = snap(store, "agent 2", "agent")
    (tree / "r.txt").write_text("1\nU\n3\nY\n5\n6\n7\n")  # the user edits line 2 since
    store.revert(f"{a.id}..{b.id}")
    assert (tree / "r.txt").read_text() == "1\nU\n3\n4\n5\n6\n7\n"
    with pytest.raises(UsageError):
        store.revert(range=f"{b.id}..{a.id}")
    with pytest.raises(UsageError):
        store.revert(range="latest..")


def test_paths_filter_limits_the_revert(tree: Path, store: Store):
    (tree / "one.txt").write_text("1\n")
    (tree / "two.txt").write_text("2\n")
    snap(store, "base", "user")
    (tree / "one.txt").write_text("agent 1\n")
    (tree / "two.txt").write_text("agent 2\n")
    cp = snap(store, "agent", "agent")
    report = store.revert(cp.id, paths=["two.txt"])
    assert (tree / "one.txt").read_text() == "agent 1\n"
    assert (tree / "two.txt").read_text() == "2\n"
    assert [o.path for o in report.outcomes] == [b"two.txt"]
    store.undo()
    assert (tree / "two.txt").read_text() == "agent 2\n"
