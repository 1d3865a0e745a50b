"""An open multipart upload on the remote (issue 26, req. 4).

snapstore never uploads in parts (``use_multipart=False``), but another client of the bucket, a
killed ``aws s3 cp`` or a hostile co-tenant, may leave one open under the remote's prefix:
started, some parts sent, never completed nor aborted.  It must confuse nothing: not a push
creating the very key it is open on, not a listing (nothing is listed as damaged or
unreferenced), not gc (nothing live deleted), not a fetch or a clone.
"""

from __future__ import annotations

import os
from typing import Any

from remote_helpers import Remote, make_store, sample_tree

from snapstore.remote import layout
from snapstore.store import Store
from snapstore.testing import assert_trees_equal, read_tree

#: Where uploads are left open: the keys a first push and gc create create-only (config, the
#: ref, the plan), keys shaped like a pack and a bundle, and a key outside the layout.
OPEN_AT = [
    "config",
    "refs/default",
    "gc/plan",
    "packs/ab/ab" + "0" * 62,
    "log/default/" + "0" * 20 + "-writer-" + "0" * 16,
    "elsewhere/upload.bin",
]
PART = 64 << 10


def open_multipart(remote: Remote, key: str) -> Any:
    """Start a multipart upload of ``key`` and send it three parts, never completing it: the
    writer buffers ``PART`` bytes, so each full buffer is an UploadPart of an upload created on
    the first one.  The writer is returned to keep it (and so the upload) alive."""
    import obstore

    writer = obstore.open_writer(remote.raw, remote.prefix + key, buffer_size=PART)
    writer.write(os.urandom(3 * PART + 100))
    writer.flush()
    return writer


def test_an_open_multipart_upload_confuses_no_command(remote, tmp_path, monkeypatch, run_cli, request):
    monkeypatch.setattr(layout, "INLINE_MAX", 0)  # data in packs, so gc has packs to judge
    writers = [open_multipart(remote, key) for key in OPEN_AT]
    if remote.kind == "seaweedfs":
        weed = request.getfixturevalue("seaweed")
        name = remote.url.rsplit("/", 1)[1]
        assert {f"{name}/{k}" for k in OPEN_AT} <= set(weed.open_uploads())  # they are open
    # An open upload is no object: nothing of it is listed.
    assert remote.keys() == []

    files = sample_tree("a")
    with make_store(tmp_path / "a", files) as a:
        remote.add_to(a)
        a.snapshot("first")
        pushed = a.push()  # creates config and refs/default, where uploads are open
        assert pushed.ref_outcome == "moved"
        (tmp_path / "a" / "more.bin").write_bytes(os.urandom(200_000))
        second = a.snapshot("second")
        assert a.push().ref_outcome == "moved"
        packs = set(remote.keys("packs/"))
        assert len(packs) == 2 and "packs/ab/ab" + "0" * 62 not in packs

        assert [r["ref"] for r in a.remote_ls()] == ["default"]
        checked = a.remote_verify()
        assert checked.ok and checked.problems == []
        assert checked.bundles == 2 and checked.unreferenced_packs == 0 and checked.checkpoints == 2

        # gc: both phases (grace and window 0) condemn nothing and delete nothing.
        assert a.remote_gc(dry_run=True, grace_s=0, window_s=0).condemned == []
        for _ in range(2):
            r = a.remote_gc(grace_s=0, window_s=0)
            assert r.condemned == [] and r.deleted == [] and r.rescued == []
            assert r.packs == 2 and r.live_packs == 2
        assert set(remote.keys("packs/")) == packs

    r = run_cli("remote", "verify", cwd=tmp_path / "a")
    assert r.code == 0, r.text
    r = run_cli("remote", "ls", cwd=tmp_path / "a")
    assert r.code == 0 and "default" in r.text

    # fetch into another store, and clone: byte-exact.
    with make_store(tmp_path / "b", {"mine.txt": b"mine\n"}) as b:
        remote.add_to(b)
        got = b.fetch()
        assert [x.checkpoint for x in got.refs] == [second.id]
    Store.clone(remote.url, tmp_path / "c", endpoint=remote.endpoint)
    assert_trees_equal(read_tree(tmp_path / "a"), read_tree(tmp_path / "c"))

    if remote.kind == "seaweedfs":  # still open after all of it: nothing completed or aborted them
        assert {f"{name}/{k}" for k in OPEN_AT} <= set(weed.open_uploads())
    assert not any(w.closed() for w in writers)  # (and the writers were alive all along)
