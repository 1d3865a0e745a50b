"""Helpers shared by the test files (imported as ``helpers``; tests/ is on sys.path)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from snapstore.store import Store

REPO = Path(__file__).resolve().parents[1]

#: The words of :func:`word_text`.
WORDS = tuple(w.encode() for w in "alpha beta gamma delta store chunk frame pack zstd value index tree".split())


def word_text(size: int, seed: int, words: tuple[bytes, ...] = WORDS) -> bytes:
    """Compressible, source-like bytes (lines of ``words``), different per seed."""
    import random

    rng = random.Random(seed)
    out = bytearray()
    while len(out) < size:
        out += b" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + b"\n"
    return bytes(out[:size])
SNAPSTORE_SCRIPT = Path(sys.executable).parent / "snapstore"


@dataclass
class CliResult:
    code: int
    out: bytes
    err: str

    @property
    def text(self) -> str:
        return self.out.decode("utf-8", "replace")


def call_cli(monkeypatch, argv, *, cwd=None, stdin: bytes = b"", env=None) -> CliResult:
    """Call snapstore.cli.main(argv) with captured stdio (and optionally another cwd/env)."""
    from snapstore import cli

    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    with monkeypatch.context() as mp:
        mp.setattr(sys, "stdout", out)
        mp.setattr(sys, "stderr", err)
        mp.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
        for key, value in (env or {}).items():
            mp.setenv(key, value)
        if cwd is not None:
            mp.chdir(cwd)
        code = cli.main(argv)
        out.flush()
        err.flush()
    return CliResult(code, out.buffer.getvalue(), err.buffer.getvalue().decode("utf-8", "replace"))


def subprocess_env(**extra: str) -> dict[str, str]:
    """An environment for child processes that import this checkout of snapstore."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SNAPSTORE_STORE", None)
    env.pop("SNAPSTORE_DEBUG", None)
    env.update(extra)
    return env


def wait_for_service(store_dir: str, seconds: float = 30.0) -> dict | None:
    """The store's service's ``--status`` answer once it answers (None after ``seconds``)."""
    import time

    from snapstore.service import daemon

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        info = daemon.status(store_dir)
        if info is not None:
            return info
        time.sleep(0.05)
    return None


def run_snapstore(*args: str, cwd, input: bytes | None = None, script: bool = False, timeout=60):
    """Run a real ``snapstore`` process (``python -m snapstore``, or the console script)."""
    cmd = [str(SNAPSTORE_SCRIPT)] if script else [sys.executable, "-m", "snapstore"]
    return subprocess.run(
        cmd + list(args),
        cwd=cwd,
        input=input,
        capture_output=True,
        env=subprocess_env(),
        timeout=timeout,
    )


def assert_one_line_error(err: str | bytes) -> None:
    """stderr is exactly one line ``snapstore: error: ...`` and no traceback."""
    if isinstance(err, bytes):
        err = err.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("snapstore: error: "), err
    assert err.endswith("\n")


def stored_bytes(backend, tables=("chunks", "packs", "streams")) -> int:
    """Sum of the stored values of ``tables`` (what the content costs in the store)."""
    total = 0
    with backend.read() as view:
        for table in tables:
            for _, value in view.items(table):
                total += len(value)
    return total


def chunk_entry(store, cid: bytes):  # type: ignore[no-untyped-def]
    """The parsed pack entry of chunk ``cid`` (storage.entries.PackEntry)."""
    from snapstore.storage import entries

    with store.backend.read() as view:
        value = view.get("chunks", cid)
    assert value is not None
    return entries.parse(cid, value)


def all_stored_bytes(backend) -> int:
    """Sum of keys and values over every table."""
    from snapstore.storage.backend import TABLES

    total = 0
    with backend.read() as view:
        for table in TABLES:
            for key, value in view.items(table):
                total += len(key) + len(value)
    return total


#: The content edits a watcher must notice, for the randomised watch tests.
FILE_EDITS = ("write", "append", "same-size", "chmod")


def edit_file(op: str, f: Path, i: int, rng) -> None:
    """Apply content edit ``op`` (one of FILE_EDITS) to the regular file ``f``."""
    if op == "write":
        f.write_bytes(b"w%d\n" % i * rng.randint(1, 50))
    elif op == "append":
        with open(f, "ab") as out:
            out.write(b"more %d\n" % i)
    elif op == "same-size":  # same size, same mtime: only the watcher (or ctime) can tell
        data = f.read_bytes()
        st = f.stat()
        f.write_bytes(bytes((b + 1) % 256 for b in data) if data else b"")
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif op == "chmod":
        f.chmod(0o755 if f.stat().st_mode & 0o100 == 0 else 0o644)
    else:
        raise ValueError(op)


@contextlib.contextmanager
def second_user(prefix: str) -> Iterator[tuple[str, int, int]]:
    """A local user made for the test and removed after it: ``(name, uid, gid)``.

    Needs root (and useradd): otherwise the test is skipped with the reason.
    """
    import pwd
    import shutil
    import time

    import pytest

    if os.geteuid() != 0:
        pytest.skip("needs root, to create a second user (useradd) who plays the other user")
    if not shutil.which("useradd"):
        pytest.skip("needs useradd to create a second user")
    name = f"{prefix}{os.getpid()}"[:31]
    for _ in range(20):  # another test may hold the lock of /etc/passwd for a moment
        made = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
            capture_output=True, text=True,
        )
        if made.returncode == 0:
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"useradd {name}: {made.stderr.strip()}")
    try:
        entry = pwd.getpwnam(name)
        yield name, entry.pw_uid, entry.pw_gid
    finally:
        subprocess.run(["userdel", name], capture_output=True)
        subprocess.run(["groupdel", name], capture_output=True)


def mcp_params(cwd: Path, *args: str, **env_extra: str):  # type: ignore[no-untyped-def]
    """How a test starts ``snapstore mcp`` in ``cwd`` through the MCP SDK's own client (no
    snapstore or agent variables from the test's environment)."""
    from mcp import StdioServerParameters

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SNAPSTORE_", "CLAUDE_", "GEMINI_"))}
    env.update(env_extra)
    return StdioServerParameters(command=sys.executable, args=["-m", "snapstore", "mcp", *args], cwd=str(cwd), env=env)


def proc_files_opened(monkeypatch) -> list[bytes]:  # type: ignore[no-untyped-def]
    """Records the paths under /proc that ``os.open`` opens from now on."""
    opened: list[bytes] = []
    real_open = os.open

    def counting_open(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if os.fsencode(path).startswith(b"/proc/"):
            opened.append(os.fsencode(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)
    return opened


def assert_state_is_a_walk(store: Store, root: Path) -> None:
    """The watching Store's kept state (records and listings) equals what a full walk of the
    tree finds now."""
    from snapstore.ops.snapshot import incremental
    from snapstore.tree import scan

    state = store.context.tree_state
    assert state is not None
    listings: scan.Listings = {}
    found = scan.walk(bytes(root), store.context.excluded, scan.ScanReport(), listings)
    assert incremental.divergences(found, state.found) == []
    assert set(state.listings) == set(listings)
    for d, walked in listings.items():
        kept = state.listings[d]
        assert (set(kept.names), set(kept.subdirs), kept.kind, kept.notes) == (
            set(walked.names), set(walked.subdirs), walked.kind, walked.notes,
        ), d  # fmt: skip
