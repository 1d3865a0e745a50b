"""Clone: a new tree with a store, holding a remote ref's checkpoint; on failure, only what
the clone made is removed (a file the user saved in the directory meanwhile stays)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from snapstore.errors import SnapstoreError, UsageError

if TYPE_CHECKING:
    from snapstore.records.checkpoint import Checkpoint
    from snapstore.remote.fetch import FetchReport
    from snapstore.storage.backend import Backend

Progress = Callable[[int, int], None]


class Cloning(Protocol):
    """What a clone needs of the store it makes (a :class:`snapstore.Store`)."""

    backend: Backend

    def remote_add(
        self, name: str, url: str, *, endpoint: str | None = ..., region: str | None = ..., profile: str | None = ...,
        encrypt: bool = ..., key_file: str | None = ...,
    ) -> object: ...

    def pull(
        self, ref: str | None = None, *, remote: str = ..., progress: Progress | None = ..., at: str | None = ...,
    ) -> FetchReport: ...

    def checkpoints(self, *, task: str | None = ..., include_safety: bool = ...) -> list[Checkpoint]: ...

    def close(self) -> None: ...


def clone_into(
    init: Callable[[str], Cloning], url: str, directory: str | os.PathLike[str], *, ref: str | None = None,
    name: str = "origin", endpoint: str | None = None, region: str | None = None, profile: str | None = None,
    progress: Progress | None = None, encrypt: bool = False, key_file: str | None = None, at: str | None = None,
) -> FetchReport:
    """What :meth:`snapstore.Store.clone` does (``init`` makes the store: ``Store.init``).

    ``directory`` (absent or empty) becomes a tree with a store; remote ref ``ref`` is fetched
    from ``url`` into it and its checkpoint restored (with ``at``, a checkpoint id or prefix:
    that checkpoint of the ref's history).  On failure, what was made is removed.
    """
    from snapstore.remote import keys, state

    target = os.path.abspath(os.fspath(directory))
    if os.path.lexists(target) and (not os.path.isdir(target) or os.path.islink(target) or os.listdir(target)):
        raise UsageError(f"{target} exists and is not an empty directory")
    state.new_config(name, url, endpoint, region, profile)  # checks the arguments first
    if key_file is not None:
        key_file = keys.settings(key_file)["key_file"]  # a missing key file is said before anything is made
    made = not os.path.exists(target)
    try:
        os.makedirs(target, exist_ok=True)
    except OSError as exc:
        from snapstore.errors import TreeIOError

        raise TreeIOError(f"cannot create {target}: {exc.strerror}") from None
    made_store = False
    written: set[str] = set()
    try:
        store = init(target)
        made_store = True
        before = set(os.listdir(target))
        try:
            store.remote_add(name, url, endpoint=endpoint, region=region, profile=profile, encrypt=encrypt,
                             key_file=key_file)
            report = store.pull(ref, remote=name, progress=progress, at=at)
        except BaseException:
            written = _restored_names(store) - before
            raise
        finally:
            store.close()
    except BaseException:
        _remove_clone(target, made, made_store, written)
        raise
    report.directory = target
    return report


def _restored_names(store: Cloning) -> set[str]:
    """The top-level names of the checkpoint a failed clone fetched (what its restore may
    have written), empty when it fetched none."""
    from snapstore.records import manifest

    names: set[str] = set()
    try:
        cps = store.checkpoints()
        with store.backend.read() as view:
            for cp in cps:  # (a fresh store: the fetched checkpoints only)
                names.update(os.fsdecode(e.path.split(b"/", 1)[0]) for e in manifest.iter_entries(view.get, cp.manifest))
    except (SnapstoreError, OSError):
        pass
    return names


def _remove_clone(target: str, made: bool, made_store: bool, written: set[str]) -> None:
    """Undo a failed clone: the store it made, the top-level entries its checkpoint names that
    were not there before it began, then the directory if the clone made it and it is empty.
    A file the user saved there meanwhile stays (and so does the directory holding it)."""
    from snapstore.storage.discovery import STORE_DIRNAME

    if made_store:
        shutil.rmtree(os.path.join(target, STORE_DIRNAME), ignore_errors=True)
    for entry in written:
        path = os.path.join(target, entry)
        if entry in (STORE_DIRNAME, "", ".", "..") or not os.path.lexists(path):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
    if made:
        try:
            os.rmdir(target)
        except OSError:
            pass  # not empty: something that is not the clone's is in it
