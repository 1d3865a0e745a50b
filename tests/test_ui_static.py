"""Static files and pages over the wire (issue 42 req 8): gzip when the browser takes it,
static files named by their content and cached (ETag, 304, immutable when versioned), pages
never cached.  The app through Starlette's TestClient."""

from __future__ import annotations

import re
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

PORT = 47833
TOKEN = "static-token-0123456789"


def test_static_files_are_gzipped_versioned_and_revalidated(tree: Path):
    for i in range(60):
        (tree / f"f{i:02d}.txt").write_text(f"file {i}\n")
    with Store.init(tree) as store:
        store.snapshot("sixty files")
        client: TestClient = logged_in(store, PORT, TOKEN)
        page = client.get("/", headers={"accept-encoding": "gzip"})
        assert page.headers.get("content-encoding") == "gzip" and page.headers["cache-control"] == "no-store"
        links = re.findall(r'(?:href|src)="(/static/[a-z.]+\?v=[0-9a-f]+)"', page.text)
        assert sorted(link.split("?")[0] for link in links) == [
            "/static/pygments.css", "/static/since.css", "/static/since.js", "/static/ui.css", "/static/ui.js"]
        for link in links:
            raw = client.get(link, headers={"accept-encoding": "identity"})
            zipped = client.get(link, headers={"accept-encoding": "gzip"})
            assert raw.status_code == 200 and "content-encoding" not in raw.headers
            assert zipped.headers["content-encoding"] == "gzip" and zipped.content == raw.content  # (httpx inflates it)
            assert int(zipped.headers["content-length"]) < len(raw.content) / 2
            assert raw.headers["cache-control"] == "private, max-age=31536000, immutable"
            etag = raw.headers["etag"]
            plain = client.get(link.split("?")[0])
            assert plain.headers["cache-control"] == "private, no-cache" and plain.headers["etag"] == etag
            again = client.get(link.split("?")[0], headers={"if-none-match": etag})
            assert again.status_code == 304 and again.content == b""
        # a raw download is never compressed (it streams with its length)
        raw = client.get("/c/latest/raw?p=f00.txt", headers={"accept-encoding": "gzip"})
        assert "content-encoding" not in raw.headers and raw.content == b"file 0\n"
