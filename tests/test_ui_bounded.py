"""Bounded rendering (issue 27 req 1): what one page may cost, whatever the files hold.

A big file's diff or view renders a capped number of rows with a way to see the rest ("show
anyway", downloads); the diff is the library's (patience), not difflib's quadratic matcher; a
page busy rendering holds no lock another page needs; a 50 MB file is never held whole by the
server.  Timings are not asserted here: benchmarks/ui_pages.py measures them.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
import tracemalloc
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed (pip install -e '.[ui]')")
pytest.importorskip("httpx", reason="httpx (for Starlette's TestClient) is not installed")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from ui_client import logged_in  # noqa: E402

from snapstore.ops import textdiff  # noqa: E402
from snapstore.store import Store  # noqa: E402
from snapstore.ui import budget, diffview  # noqa: E402
from snapstore.ui.html import path_token  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PORT = 47812
ORIGIN = f"http://127.0.0.1:{PORT}"
TOKEN = "bounded-token-0123456789"
MB = 1 << 20


def client_for(store: Store) -> TestClient:
    return logged_in(store, PORT, TOKEN)


def big_text(lines: int) -> str:
    """An 80,000-line file is ~1.4 MB: unique lines, like generated code or a lockfile."""
    return "".join(f"key{i:06d} = v({i % 997})\n" for i in range(lines))


def scattered_edit(text: str) -> str:
    """Every third line changed: the input that took difflib 182 s."""
    return "".join(line.replace("v(", "w(") if i % 3 == 0 else line for i, line in enumerate(text.splitlines(True)))


def rows(html: str) -> int:
    return len(re.findall(r'<tr class="(?:add|del|ctx)"', html))


@pytest.fixture
def big_store(tree: Path) -> Iterator[Store]:
    text = big_text(80_000)
    assert 1.3 * MB < len(text) < 1.6 * MB
    (tree / "deps.lock.py").write_text(text)
    with Store.init(tree) as store:
        store.snapshot("add the lockfile")
        (tree / "deps.lock.py").write_text(scattered_edit(text))
        store.snapshot("rewrite a third of it")
        yield store


def test_the_ui_diff_is_the_librarys_and_counts_what_the_cli_counts(big_store: Store, monkeypatch):
    calls: list[int] = []
    library = textdiff.opcodes

    def spy(a, b):
        calls.append(len(a))
        return library(a, b)

    monkeypatch.setattr(textdiff, "opcodes", spy)
    change = big_store.changes("latest")[0]
    a, _ = diffview.split_lines(change.old_bytes() or b"")
    b, _ = diffview.split_lines(change.new_bytes() or b"")
    codes = diffview.opcodes(a, b)
    assert calls, "the UI matched the lines without the library's diff"
    added = sum(j2 - j1 for tag, _i1, _i2, j1, j2 in codes if tag != "equal")
    removed = sum(i2 - i1 for tag, i1, i2, _j1, _j2 in codes if tag != "equal")
    assert (added, removed) == (26_667, 26_667)
    monkeypatch.setattr(textdiff, "opcodes", library)
    assert textdiff.count(change)[:2] == (added, removed)


def test_a_scattered_edit_of_a_big_file_renders_capped_rows_with_a_way_to_the_rest(big_store: Store):
    client = client_for(big_store)
    page = client.get(f"/c/{big_store.resolve('latest').id}")
    assert page.status_code == 200
    assert rows(page.text) == budget.DEFAULT.file_lines
    assert "Showing 2,000 of 106,667 lines of this diff." in page.text  # 2 x 26,667 changed, 53,333 context
    assert len(page.content) < 1 * MB  # it was 12 MB
    anyway = re.search(r'<a href="([^"]+)" class="anyway">Show anyway</a>', page.text)
    assert anyway and "full=1" in anyway.group(1)
    assert re.search(r'<a href="/c/[0-9a-f]+/raw\?p=deps.lock.py" download>download the new version</a>', page.text)
    # and the split view counts its rows the same way
    split = client.get(f"/c/{big_store.resolve('latest').id}?view=split")
    assert split.text.count('<td class="mk add">') <= budget.DEFAULT.file_lines


def test_show_anyway_renders_the_whole_diff(tree: Path, monkeypatch):
    monkeypatch.setattr(budget, "DEFAULT", budget.Limits(page_lines=100, file_lines=50, file_bytes=MB))
    text = big_text(300)
    (tree / "a.py").write_text(text)
    with Store.init(tree) as store:
        store.snapshot("one")
        (tree / "a.py").write_text(scattered_edit(text))
        store.snapshot("two")
        client = client_for(store)
        cut = client.get("/c/latest")
        assert rows(cut.text) == 50 and "Show anyway" in cut.text
        whole = client.get("/c/latest?full=1")
        assert rows(whole.text) == 300 + 100  # every line, the changed ones twice
        assert "Showing" not in whole.text and "Show anyway" not in whole.text


def test_a_side_larger_than_the_cap_is_not_read_and_says_how_to_see_it(tree: Path, monkeypatch):
    monkeypatch.setattr(budget, "DEFAULT", budget.Limits(page_lines=100, file_lines=50, file_bytes=1000))
    (tree / "a.py").write_text(big_text(10))
    with Store.init(tree) as store:
        store.snapshot("one")
        (tree / "a.py").write_text(big_text(100))
        store.snapshot("two")
        page = client_for(store).get("/c/latest")
        assert "Too large to show here" in page.text and rows(page.text) == 0
        assert "Show anyway" in page.text and "download the old version" in page.text


def test_a_page_past_its_first_part_loads_the_rest_as_fragments(tree: Path, monkeypatch):
    monkeypatch.setattr(budget, "DEFAULT", budget.Limits(page_lines=120, file_lines=50, file_bytes=MB))
    with Store.init(tree) as store:
        for i in range(4):
            (tree / f"f{i}.txt").write_text(big_text(60))
        store.snapshot("four files")
        client = client_for(store)
        page = client.get("/c/latest").text
        assert rows(page) == 120  # 50 + 50 + 20
        assert "reached its limit" not in page
        lazy = re.findall(r'<div class="lazy" data-src="([^"]+)">', page)
        assert len(lazy) == 1 and "p=f3.txt" in lazy[0] and "frag=1" in lazy[0]
        assert re.search(r'<a href="/c/[0-9a-f]+\?p=f3.txt&amp;view=unified">Show this diff alone</a>', page)
        fragment = client.get(lazy[0].replace("&amp;", "&"))
        assert fragment.status_code == 200 and rows(fragment.text) == 50
        assert "<html" not in fragment.text  # a piece of the page, not a page


def test_other_pages_answer_while_a_big_diff_renders(big_store: Store, monkeypatch):
    """A page stuck in rendering (held here on purpose) holds no lock: the timeline, the
    operations page and the revision poll all answer meanwhile."""
    started, release = threading.Event(), threading.Event()
    render = diffview.change_body

    def slow_render(*args, **kwargs):
        started.set()
        assert release.wait(60), "the test never released the render"
        return render(*args, **kwargs)

    monkeypatch.setattr(diffview, "change_body", slow_render)
    client = client_for(big_store)
    answers: list[int] = []
    slow = threading.Thread(target=lambda: answers.append(client.get("/c/latest").status_code))
    slow.start()
    try:
        assert started.wait(60)
        others = [client.get(p) for p in ("/", "/ops", "/api/revision", "/history?path=deps.lock.py")]
        assert [r.status_code for r in others] == [200, 200, 200, 200]
        assert slow.is_alive() and not answers  # the big page was still rendering all along
    finally:
        release.set()
        slow.join(60)
    assert answers == [200]


def write_big(path: Path, size: int) -> str:
    """A text file of ``size`` bytes, written in pieces; its BLAKE2 digest (to check downloads)."""
    line = b"".join(b"%07d the quick brown fox jumps over the lazy dog\n" % i for i in range(1000))
    digest = hashlib.blake2b()
    with path.open("wb") as f:
        left = size
        while left:
            piece = line[:left]
            f.write(piece)
            digest.update(piece)
            left -= len(piece)
    return digest.hexdigest()


@pytest.mark.slow
def test_a_50_mb_file_view_and_download_stay_under_50_mb_of_server_memory(tree: Path):
    from snapstore.ui.server import background

    httpx = pytest.importorskip("httpx")
    digest = write_big(tree / "huge.txt", 50 * MB)
    with Store.init(tree) as store:
        store.snapshot("a 50 MB text file")
        cid = store.resolve("latest").id
        client = client_for(store)
        tracemalloc.start()
        try:
            view = client.get(f"/c/{cid}/file?p=huge.txt")
            checkpoint = client.get(f"/c/{cid}")
            view_peak = tracemalloc.get_traced_memory()[1]
            with background(store) as running, httpx.Client(follow_redirects=True) as web:
                assert web.get(running.url).status_code == 200  # logs in (the session cookie)
                tracemalloc.reset_peak()
                got = hashlib.blake2b()
                base = running.url.split("/?")[0]
                with web.stream("GET", f"{base}/c/{cid}/raw?p={path_token(b'huge.txt')}") as raw:
                    assert raw.status_code == 200
                    assert raw.headers["content-length"] == str(50 * MB)
                    for piece in raw.iter_bytes():
                        got.update(piece)
                download_peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert view.status_code == 200 and checkpoint.status_code == 200
    assert "Showing the first 2,000 lines" in view.text and rows_of_file(view.text) == 2_000
    assert len(view.content) < 1 * MB  # it was a 111 MB page
    assert "Too large to show here" in checkpoint.text
    assert got.hexdigest() == digest
    print(f"peaks: file view {view_peak / MB:.1f} MiB, download {download_peak / MB:.1f} MiB")
    assert view_peak < 50 * MB, f"file view peak {view_peak / MB:.1f} MiB"
    assert download_peak < 50 * MB, f"download peak {download_peak / MB:.1f} MiB"


def rows_of_file(html: str) -> int:
    return len(re.findall(r'<tr id="L\d+">', html))


def test_what_a_page_shows_does_not_depend_on_how_long_it_takes(tree: Path, monkeypatch):
    """The budget counts work, not seconds: with highlighting made slow (a loaded machine, four
    other pages loading), every diff is still rendered (it was "Not rendered: this page reached
    its limit" after 3 s)."""
    from snapstore.ui import highlight

    lex = highlight._lex

    def slow_lex(*args, **kwargs):
        time.sleep(0.3)
        return lex(*args, **kwargs)

    monkeypatch.setattr(highlight, "_lex", slow_lex)
    with Store.init(tree) as store:
        for i in range(7):
            (tree / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n")
        store.snapshot("one")
        for i in range(7):
            (tree / f"m{i}.py").write_text(f"def f{i}():\n    return {i + 1}\n")
        store.snapshot("two")
        highlight.CACHE.clear()
        started = time.monotonic()
        page = client_for(store).get("/c/latest").text
        assert time.monotonic() - started > 3.5
        assert rows(page) == 7 * 3 and page.count('class="lazy"') == 0
        assert "reached its limit" not in page
