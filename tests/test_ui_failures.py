"""Fail per file, not per page (issue 42 req 7): one damaged chunk marks its file and the page
renders the others; a store that vanished, an empty store and a remote each get a page that
says what is going on.  A real LMDB store on disk, damaged in place; the app through
Starlette's TestClient."""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed (pip install -e '.[ui]')")
pytest.importorskip("httpx", reason="httpx (for Starlette's TestClient) is not installed")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from ui_client import logged_in  # noqa: E402

from snapstore.store import Store  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PORT = 47832
TOKEN = "failures-token-0123456789"


def client_for(store: Store, **args: object) -> TestClient:
    return logged_in(store, PORT, TOKEN, **args)


def damage_entry(store: Store, cid: bytes) -> None:
    """Make one chunk unreadable: its index entry names a pack the store does not have."""
    with store.backend.write() as batch:
        value = bytearray(batch.get("chunks", cid) or b"")
        value[-3] ^= 0x55
        batch.put("chunks", cid, bytes(value))


def test_one_damaged_file_is_marked_and_the_rest_of_its_checkpoint_renders(tree: Path):
    (tree / "keep.py").write_text("a = 1\n")
    with Store.init(tree) as store:
        store.snapshot("one")
        (tree / "keep.py").write_text("a = 2\n")
        (tree / "plot.bin").write_bytes(b"\x00binary picture " * 50)
        (tree / "notes.txt").write_text("a note\n")
        cp = store.snapshot("two")
        entry = next(e for e in store.entries(cp.id) if e.path == b"plot.bin")
        damage_entry(store, entry.ref)
        client = client_for(store)
        page = client.get(f"/c/{cp.id}")
        assert page.status_code == 200, page.text[:300]
        html = page.text
        assert re.search(r'<p class="note damaged" role="alert"><strong>Damaged:</strong> the stored content of <code>plot.bin</code>', html)
        assert "snapstore verify --repair" in html
        assert '<td class="lines">damaged</td>' in html
        # the other files, their diffs and the rest of the page are there
        assert "+a = 2" in re.sub(r"<[^>]+>", "", html).replace("\n", "")
        assert "a note" in html and 'id="conversation"' in html
        # and the damaged file's own view is a page with its error, not a bare 500
        alone = client.get(f"/c/{cp.id}?p=plot.bin")
        assert alone.status_code == 200 and "Damaged:" in alone.text


def test_an_empty_store_says_how_to_take_the_first_checkpoint(tree: Path):
    (tree / "a.txt").write_text("a\n")
    with Store.init(tree) as store:
        html = client_for(store).get("/").text
        assert "<h1>No checkpoints yet</h1>" in html
        assert "snapstore snapshot" in html and "snapstore integrate" in html
        assert 'id="timeline" data-src="/timeline.frag"' in html  # the first one appears by itself
        ops = client_for(store).get("/ops").text
        assert "No restore, undo or revert has been done" in ops


def test_a_store_that_vanished_gets_a_page_that_says_so(tree: Path):
    (tree / "a.txt").write_text("a\n")
    with Store.init(tree) as store:
        store.snapshot("one")
        client = client_for(store)
        assert client.get("/").status_code == 200
        shutil.rmtree(tree / ".snapstore")
        for path in ("/", "/c/latest", "/ops", "/compare?a=latest"):
            r = client.get(path)
            assert r.status_code == 410, (path, r.status_code)
            assert "is gone: its directory was deleted or moved" in r.text
        assert client.get("/api/revision").status_code == 410  # the live poll stops


def test_a_remote_view_has_no_operations(tree: Path):
    (tree / "a.txt").write_text("a\n")
    with Store.init(tree) as store:
        store.snapshot("one")
        html = client_for(store, read_only=True, remote="origin").get("/").text
        assert 'href="/ops"' not in html
        ops = client_for(store, read_only=True, remote="origin").get("/ops").text
        assert "A remote has no operations" in ops and "No restore" not in ops
