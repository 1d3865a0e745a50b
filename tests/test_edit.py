"""The safe edit tool: Store.edit, ``snapstore edit`` and the engine in snapstore.ops.edit."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapstore import Store
from snapstore.errors import ConflictError, TreeIOError, UnsafePathError, UsageError
from snapstore.ops import edit as engine

CODE = """import os


def load(path):
    with open(path) as f:
        return f.read()


def save(path, data):
    with open(path, "w") as f:
        f.write(data)
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "io.py").write_text(CODE)
    return tmp_path


@pytest.fixture
def store(tree: Path):
    with Store.init(tree) as s:
        s.snapshot("start")
        yield s


def one(old: str, new: str) -> list[dict[str, str]]:
    return [{"old_text": old, "new_text": new}]


def test_exact_match_reports_level_and_lines_and_checkpoints_first(tree: Path, store: Store) -> None:
    (tree / "io.py").write_text(CODE + "\n# user's change\n")
    report = store.edit("io.py", one("return f.read()", "return f.read().strip()"))
    assert [(m.level, m.start_line, m.end_line) for m in report.matches] == [("exact", 6, 6)]
    assert (tree / "io.py").read_text() == CODE.replace("f.read()", "f.read().strip()") + "\n# user's change\n"
    assert "-        return f.read()\n+        return f.read().strip()\n" in report.diff
    # The checkpoint before the write holds the file as it was (the user's change included).
    cp = store.resolve(report.checkpoint or "")
    assert cp.message == "before edit: io.py" and cp.metadata["actor"] == "user"
    assert store.read_bytes(cp.id, "io.py").decode() == CODE + "\n# user's change\n"
    assert report.new_hash == engine.content_hash((tree / "io.py").read_bytes())


def test_whitespace_level_reindents_the_new_text(tree: Path, store: Store) -> None:
    # The caller indented by two where the file indents by four.
    old = 'def save(path, data):\n  with open(path, "w") as f:\n    f.write(data)'
    new = 'def save(path, data):\n  with open(path, "w") as f:\n    f.write(data)\n    f.flush()'
    report = store.edit(tree / "io.py", one(old, new))
    assert [(m.level, m.start_line, m.end_line) for m in report.matches] == [("whitespace", 9, 11)]
    assert (tree / "io.py").read_text().endswith(
        'def save(path, data):\n    with open(path, "w") as f:\n        f.write(data)\n        f.flush()\n'
    )


def test_similar_level_accepts_a_typo_and_reports_the_similarity(tree: Path, store: Store) -> None:
    report = store.edit("io.py", one("def laod(path):\n    with open(path) as f:", "def load(path, mode='r'):\n    with open(path, mode) as f:"))
    (m,) = report.matches
    assert (m.level, m.start_line, m.end_line) == ("similar", 4, 5)
    assert engine.SIMILARITY_THRESHOLD <= m.similarity < 1.0
    assert "def load(path, mode='r'):\n    with open(path, mode) as f:\n        return f.read()" in (tree / "io.py").read_text()


def test_ambiguous_match_is_an_error_listing_them_unless_replace_all(tree: Path, store: Store) -> None:
    with pytest.raises(UsageError, match=r"matches 2 places .*line 5, line 10"):
        store.edit("io.py", one("    with open(path", "    with open(str(path)"))
    assert (tree / "io.py").read_text() == CODE
    report = store.edit("io.py", one("    with open(path", "    with open(str(path)"), replace_all=True)
    assert [m.start_line for m in report.matches] == [5, 10]
    assert (tree / "io.py").read_text().count("open(str(path)") == 2


def test_no_match_names_the_closest_candidate_and_its_similarity(tree: Path, store: Store) -> None:
    with pytest.raises(UsageError, match=r"not found in io.py; the closest is line 4 \(similarity 0\.\d\d < 0\.9\): 'def load\(path\):'"):
        store.edit("io.py", one("def read_all(name):", "x"))
    assert (tree / "io.py").read_text() == CODE


def test_version_conflict_writes_nothing(tree: Path, store: Store) -> None:
    before = len(store.checkpoints())
    stale = engine.content_hash(CODE.encode())
    (tree / "io.py").write_text(CODE + "# someone else\n")
    with pytest.raises(ConflictError, match="changed since it was read"):
        store.edit("io.py", one("import os", "import sys"), expected=stale)
    assert (tree / "io.py").read_text() == CODE + "# someone else\n"
    assert len(store.checkpoints()) == before
    ok = store.edit("io.py", one("import os", "import sys"), expected=engine.content_hash((tree / "io.py").read_bytes()))
    assert ok.written


def test_crlf_stays_crlf_and_other_bytes_are_untouched(tree: Path, store: Store) -> None:
    raw = b"first\r\nlatin-1 \xe9t\xe9\r\nkeep  me \r\nlast"
    (tree / "w.txt").write_bytes(raw)
    report = store.edit("w.txt", one("keep  me \nlast", "kept\nand more\nlast"))
    assert report.matches[0].level == "exact"  # the LF of old_text matches the file's CRLF
    assert (tree / "w.txt").read_bytes() == b"first\r\nlatin-1 \xe9t\xe9\r\nkept\r\nand more\r\nlast"


def test_dry_run_prints_the_diff_and_changes_nothing(tree: Path, store: Store) -> None:
    before = len(store.checkpoints())
    report = store.edit("io.py", one("import os", "import sys"), dry_run=True)
    assert report.diff.startswith("--- a/io.py\n+++ b/io.py\n") and "-import os\n+import sys\n" in report.diff
    assert not report.written and report.checkpoint is None
    assert (tree / "io.py").read_text() == CODE
    assert len(store.checkpoints()) == before


def test_mode_is_kept(tree: Path, store: Store) -> None:
    (tree / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(tree / "run.sh", 0o775)  # group-writable: a umask of 022 would take that away
    store.edit("run.sh", one("echo hi", "echo hello"))
    assert stat.S_IMODE((tree / "run.sh").stat().st_mode) == 0o775
    assert (tree / "run.sh").read_text() == "#!/bin/sh\necho hello\n"


def test_several_edits_apply_in_order(tree: Path, store: Store) -> None:
    store.edit("io.py", [{"old_text": "import os", "new_text": "import io"}, {"old_text": "import io", "new_text": "import io, os"}])
    assert (tree / "io.py").read_text().startswith("import io, os\n")


@pytest.mark.parametrize("bad", ["../outside.txt", ".git/config", ".snapstore/lock", "/etc/hostname", "link_out/x.txt", "sneaky.txt"])
def test_paths_outside_the_tree_git_store_and_links_out_are_refused(tree: Path, store: Store, bad: str) -> None:
    outside = tree.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "x.txt").write_text("secret\n")
    (tree.parent / "outside.txt").write_text("secret\n")
    (tree / ".git").mkdir(exist_ok=True)
    (tree / ".git" / "config").write_text("secret\n")
    if not (tree / "link_out").is_symlink():
        os.symlink(outside, tree / "link_out")
        os.symlink(outside / "x.txt", tree / "sneaky.txt")
    with pytest.raises(UnsafePathError):
        store.edit(bad, one("secret", "owned"))
    assert (outside / "x.txt").read_text() == "secret\n"
    assert (tree / ".git" / "config").read_text() == "secret\n"


def test_a_directory_or_missing_file_is_a_tree_error(tree: Path, store: Store) -> None:
    (tree / "d").mkdir()
    for bad in ("d", "missing.py"):
        with pytest.raises(TreeIOError):
            store.edit(bad, one("a", "b"))


@settings(max_examples=150, deadline=None)
@given(
    prefix=st.binary(max_size=200).filter(lambda b: b"X" not in b and b"\0" not in b),
    suffix=st.binary(max_size=200).filter(lambda b: b"X" not in b and b"\0" not in b),
    old=st.text(alphabet="abc \t", max_size=20).map(lambda s: "X" + s + "X"),
    new=st.text(alphabet="abcXY \t\u00e9", max_size=20),
)
def test_an_exact_edit_changes_only_the_matched_span(prefix: bytes, suffix: bytes, old: str, new: str) -> None:
    if old == new:
        return
    data = prefix + old.encode() + suffix
    out, matches, _ = engine.plan(data, [engine.Edit(old, new)])
    assert matches[0].level == "exact"
    assert out == prefix + new.encode() + suffix


# -- the command line ----------------------------------------------------------------------------


def cli(tree: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAPSTORE_")}
    return subprocess.run(
        [sys.executable, "-c", "from snapstore.service.client import run; run()", *args],
        cwd=tree, env=env, input=stdin, capture_output=True, text=True, timeout=60,
    )


def test_cli_edit_old_new_dry_run_edits_from_stdin_and_exit_codes(tree: Path) -> None:
    Store.init(tree).close()
    dry = cli(tree, "edit", "io.py", "--old", "import os", "--new", "import sys", "--dry-run")
    assert dry.returncode == 0 and "+import sys" in dry.stdout and "dry run" in dry.stderr
    assert (tree / "io.py").read_text() == CODE
    done = cli(tree, "edit", "io.py", "--edits", "-", "--json", stdin=json.dumps(one("import os", "import sys")))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["written"] and report["matches"][0]["level"] == "exact"
    conflict = cli(tree, "edit", "io.py", "--old", "import sys", "--new", "import re", "--expected", report["old_hash"])
    assert conflict.returncode == 9 and conflict.stderr.startswith("snapstore: error: io.py changed since it was read")
    missing = cli(tree, "edit", "io.py", "--old", "nothing like this", "--new", "x")
    assert missing.returncode == 2 and "closest" in missing.stderr
    outside = cli(tree, "edit", "../x", "--old", "a", "--new", "b")
    assert outside.returncode == 10
