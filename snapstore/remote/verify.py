"""``remote verify``: read every published object and report every problem.

Lists the bundles (``log/``) and refs (``refs/``); reads each bundle (but those forget records
took out of every history and no ref names) and every object it needs,
once each, checking names against hashes, frames, chunk ids and records; imports them into a
throw-away store (on disk, beside the local store) and walks each bundle's checkpoints there, so a chunk a bundle needs
but no object holds is found too.  Reads the whole remote: a maintenance command, not a per-push
cost.  Packs no bundle names are counted (``remote gc`` would remove them), not problems.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from snapstore.errors import CorruptError
from snapstore.remote import closure, layout
from snapstore.remote.fetch import import_pack
from snapstore.remote.state import CACHE_DIRNAME
from snapstore.remote.transport import Transport
from snapstore.storage import entries
from snapstore.storage.backend import Backend
from snapstore.storage.memory import MemoryBackend

Progress = Callable[[int, int], None]


class RemoteVerifyReport:
    def __init__(self) -> None:
        self.bundles = 0
        self.refs = 0
        self.objects = 0
        self.bytes_read = 0
        self.checkpoints = 0
        self.unreferenced_packs = 0
        self.problems: list[dict[str, str]] = []
        #: Objects a bundle needs that the remote does not have (a push must not count on them).
        self.missing: list[str] = []
        self.forgotten = 0  # bundles forget records took out of their histories (not checked)
        self.ref_list: list[tuple[str, layout.Ref]] = []

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, key: str, why: str) -> None:
        self.problems.append({"object": key, "problem": why})

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        del d["ref_list"]
        d["ok"] = self.ok
        return d


def run(transport: Transport, progress: Progress | None = None, scratch: Backend | None = None) -> RemoteVerifyReport:
    """Check everything published.  What is read goes into ``scratch`` (an empty store; a
    throw-away on-disk one keeps memory to the largest object, not the remote), one object
    at a time."""
    report = RemoteVerifyReport()
    mem = scratch if scratch is not None else MemoryBackend()
    packs_seen: dict[str, bool] = {}  # key -> read and sound
    from snapstore.remote import history

    listed = [e.key for e in transport.list("log/")]
    forgotten: set[str] = set()
    for key in listed:
        if history.is_forget_key(key):
            try:
                forgotten.update(b for f in history.read_forgets(transport, [key]) for b in f.bundles)
            except CorruptError as exc:
                report.problem(key, exc.message)
    # A forgotten bundle is in no history: gc may have reclaimed what it alone needed.  One a
    # live bundle needs (for its inline data) is checked as that bundle's object.
    forgotten -= _ref_bundles(transport, report)
    bundle_keys = [k for k in listed if not history.is_forget_key(k) and k not in forgotten]
    report.forgotten = sum(1 for k in listed if k in forgotten)
    for i, key in enumerate(bundle_keys):
        report.bundles += 1
        got = transport.get(key)
        if got is None:
            report.problem(key, "listed but cannot be read")
            continue
        report.bytes_read += len(got.body)
        try:
            bundle = layout.parse_bundle(key, got.body)
        except CorruptError as exc:
            report.problem(key, exc.message)
            continue
        packs_seen[key] = True
        sound = True
        if bundle.inline is not None:
            sound = _import(mem, key, bundle.inline, report)
        for need in bundle.needs:
            if need not in packs_seen:
                packs_seen[need] = _read(transport, mem, need, report)
            if not packs_seen[need]:
                report.problem(key, f"needs {need}, which is missing or damaged")
                sound = False
        if sound:
            try:
                with mem.read() as view:
                    need_ = closure.of(view.get, bundle.checkpoints)
                lacking = [c for c, ok in zip(need_.chunks, mem.has_many("chunks", list(need_.chunks))) if not ok]
                if lacking:
                    report.problem(key, f"its checkpoints need {len(lacking)} chunks no object holds (e.g. {lacking[0].hex()})")
                report.checkpoints += len(bundle.checkpoints)
            except CorruptError as exc:
                report.problem(key, f"its checkpoints cannot be read whole: {exc.message}")
        entries.clear_cache()  # (frames read for one bundle's walk: memory is per object, not per remote)
        if progress is not None:
            progress(i + 1, len(bundle_keys))
    for key, ref in report.ref_list:
        if ref.bundle not in packs_seen:
            report.problem(key, f"names the bundle {ref.bundle}, which is missing")
    for entry in transport.list("packs/"):
        if entry.key not in packs_seen:
            report.unreferenced_packs += 1
    return report


def _ref_bundles(transport: Transport, report: RemoteVerifyReport) -> set[str]:
    """Read every ref (kept in ``report.ref_list``; a damaged one is a problem): the bundles
    they name."""
    for entry in transport.list("refs/"):
        report.refs += 1
        got = transport.get(entry.key)
        if got is None:
            continue  # moved away between the listing and the read: not a problem
        try:
            report.ref_list.append((entry.key, layout.parse_ref(entry.key, got.body)))
        except CorruptError as exc:
            report.problem(entry.key, exc.message)
    return {ref.bundle for _, ref in report.ref_list}


def _read(transport: Transport, mem: Backend, key: str, report: RemoteVerifyReport) -> bool:
    got = transport.get(key)
    report.objects += 1
    if got is None:
        report.problem(key, "missing")
        report.missing.append(key)
        return False
    report.bytes_read += len(got.body)
    try:
        if key.startswith("packs/"):
            pack: layout.Pack | None = layout.parse_pack(key, got.body, layout.pack_name_of(key))
        else:
            pack = layout.parse_bundle(key, got.body).inline
    except CorruptError as exc:
        report.problem(key, exc.message)
        return False
    return pack is None or _import(mem, key, pack, report)


def _import(mem: Backend, key: str, pack: layout.Pack, report: RemoteVerifyReport) -> bool:
    try:
        with mem.write() as batch:
            import_pack(batch, key, pack, lambda c: batch.get("chunks", c) is not None)
    except CorruptError as exc:
        report.problem(key, exc.message)
        return False
    return True


@contextmanager
def scratch_store(store_dir: str | None) -> Iterator[Backend | None]:
    """A throw-away on-disk store in the store directory (not a tmpfs: what it holds is the
    size of the remote), removed after use; None for a store kept in memory."""
    if store_dir is None:
        yield None
        return
    import tempfile

    from snapstore.storage.lmdb_backend import LmdbBackend

    base = os.path.join(store_dir, CACHE_DIRNAME)
    os.makedirs(base, mode=0o700, exist_ok=True)
    for entry in os.scandir(base):  # left by a verify killed a day ago or more
        if entry.name.startswith("verify-") and entry.stat(follow_symlinks=False).st_mtime < time.time() - 86400:
            shutil.rmtree(entry.path, ignore_errors=True)
    path = tempfile.mkdtemp(prefix="verify-", dir=base)
    try:
        backend = LmdbBackend(path, create=True)
        try:
            yield backend
        finally:
            backend.close()
    finally:
        shutil.rmtree(path, ignore_errors=True)
