"""Small tree helpers for the restore, diff and crash tests."""

from __future__ import annotations

import os
import random
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

SKIP = {".snapstore", ".git"}


def read_tree(root: Path, skip: set[str] = SKIP) -> dict[str, tuple]:
    """Path -> ("file", bytes, exec) | ("link", target) | ("dir",) for everything below root.

    Every directory is listed (so an empty one shows), except the skipped top-level names.
    """
    out: dict[str, tuple] = {}
    root = Path(root)
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d not in skip]
        for d in list(dirnames):
            p = os.path.join(dirpath, d)
            rel = os.path.normpath(os.path.join(rel_dir, d))
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
                dirnames.remove(d)
            else:
                out[rel] = ("dir",)
        for f in filenames:
            p = os.path.join(dirpath, f)
            rel = os.path.normpath(os.path.join(rel_dir, f))
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            else:
                out[rel] = ("file", Path(p).read_bytes(), bool(st.st_mode & 0o100))
    return out


def write_tree(root: Path, spec: dict[str, object]) -> None:
    """Create files (bytes), exec files (("exec", bytes)), symlinks (("link", target)), dirs (None)."""
    root = Path(root)
    for rel, value in spec.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if value is None:
            p.mkdir(exist_ok=True)
        elif isinstance(value, tuple) and value[0] == "link":
            os.symlink(value[1], p)
        elif isinstance(value, tuple) and value[0] == "exec":
            p.write_bytes(value[1])
            p.chmod(0o755)
        else:
            p.write_bytes(value)  # type: ignore[arg-type]


def sample_spec(n: int = 40, seed: int = 0) -> dict[str, object]:
    import random

    rng = random.Random(seed)
    spec: dict[str, object] = {}
    for i in range(n):
        d = rng.choice(["", "src/", "src/pkg/", "docs/", "deep/a/b/c/"])
        spec[f"{d}f{i}.txt"] = f"file {i}\n".encode() * rng.randint(1, 300)
    spec["src/f1.txt"] = b"file 1\n" * 10
    spec["src/f3.txt"] = b"file 3\n" * 10
    spec["bin/tool"] = ("exec", b"#!/bin/sh\necho hi\n")
    spec["link"] = ("link", "src/f1.txt")
    spec["empty/dir"] = None
    spec["big.bin"] = rng.randbytes(300_000)
    return spec


def plant_checkpoint(store, entries: list, content: bytes = b"pwned\n") -> str:
    """Write a checkpoint with arbitrary (hostile) entries through the internal API; ``content``
    is stored as a chunk, so a file entry whose ref is ``chunk_id(content)`` restores.  Each
    planted checkpoint gets the next log sequence (and that as its time, so two are distinct)."""
    from snapstore.records.checkpoint import build_record, seq_key
    from snapstore.records.manifest import write_manifest
    from snapstore.storage.objects import chunk_id, encode_chunk

    objs = []
    entries = sorted(entries, key=lambda e: e.path)
    mid, _, record = write_manifest(entries, lambda cid, value: objs.append((cid, value)))

    cid = chunk_id(content)
    with store.backend.read() as view:
        last = next(iter(view.items("log", reverse=True)), None)
    seq = int.from_bytes(last[0], "big") + 1 if last else 1
    rec_id, packed = build_record(
        parent=None, time_ns=seq, message="hostile", task=None, tags=[], kind="checkpoint",
        manifest=mid, conversation=None, metadata={}, stats={},
    )
    with store.backend.write() as batch:
        for k, v in objs:
            batch.put_new("chunks", k, v)
        if record:
            batch.put("streams", mid, record)
        batch.put_new("chunks", cid, encode_chunk(content))
        batch.put("checkpoints", rec_id, packed)
        batch.put("log", seq_key(seq), rec_id)
    return rec_id.hex()


def mutate_tree(tree: Path, rng: random.Random, names: list[str], ops: list[str]) -> None:
    """1-5 random changes to ``tree`` among ``names``: writes, deletions, exec bits, symlinks,
    empty directories, files turned into directories ("dirify"), an ignored file beside one
    ("ignored") and a whole top-level directory removed ("rmtree"), as ``ops`` allows."""
    for _ in range(rng.randint(1, 5)):
        rel = rng.choice(names)
        p = tree / rel
        op = rng.choice(ops)
        if op == "rmtree":
            top = tree / rel.split("/")[0]
            if top.is_dir() and not top.is_symlink() and rng.random() < 0.3:
                shutil.rmtree(top)
            continue
        if op in ("dirify", "emptydir"):
            if p.is_dir() and not p.is_symlink():
                continue
            if p.exists() or p.is_symlink():
                p.unlink()
            p.parent.mkdir(parents=True, exist_ok=True)
            p.mkdir()
            if op == "dirify":
                (p / "inner").write_text(f"inner {rng.random()}\n")
            continue
        if p.is_dir() and not p.is_symlink() or (p.parent.exists() and not p.parent.is_dir()):
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        _change_file(p, rel, op, rng)


def _change_file(p: Path, rel: str, op: str, rng: random.Random) -> None:
    if op == "write":
        if p.is_symlink():
            p.unlink()
        p.write_text(f"{rel} {rng.random()}\n" * rng.randint(1, 3))
    elif op == "delete":
        if p.exists() or p.is_symlink():
            p.unlink()
    elif op == "exec" and p.is_file() and not p.is_symlink():
        p.chmod(p.stat().st_mode ^ 0o111)
    elif op == "link":
        if p.exists() or p.is_symlink():
            p.unlink()
        os.symlink(f"target-{rng.randint(0, 3)}", p)
    elif op == "ignored":
        (p.parent / "build.log").write_text("ignored\n")


def random_history(store: Any, tree: Path, rng: random.Random, mutate: Callable[[Path, random.Random], None], n: int = 6) -> list[str]:
    """``n`` checkpoints of ``tree``, each after a random ``mutate``; their ids."""
    ids = []
    for _ in range(n):
        mutate(tree, rng)
        ids.append(store.snapshot("step").id)
    return ids
