"""The timeline at any length (issue 27 req 5): pages read only their own records, row numbers
never move, path filters by file, directory and glob, search in messages, older/newer links.
First-byte timings at 300, 2,000 and 20,000 checkpoints: benchmarks/ui_pages.py."""

from __future__ import annotations

import re
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

from snapstore.records import history  # noqa: E402
from snapstore.store import Store  # noqa: E402
from snapstore.ui import timeline  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PORT = 47813
ORIGIN = f"http://127.0.0.1:{PORT}"
TOKEN = "timeline-token-0123456789"


def client_for(store: Store) -> TestClient:
    return logged_in(store, PORT, TOKEN)


def labels(html: str) -> list[int]:
    """The row numbers of a timeline page, top to bottom."""
    return [int(n) for n in re.findall(r'<td class="ref"><span title="checkpoint number \d+[^"]*">#(\d+)</span>', html)]


def older_link(html: str) -> str | None:
    found = re.search(r'<a href="([^"]+)" rel="next" id="older">', html)
    return found.group(1).replace("&amp;", "&") if found else None


@pytest.fixture
def long_store(tree: Path, monkeypatch) -> Iterator[Store]:
    """45 checkpoints, 10 a page: each edits one of src/a.py, src/b.txt, docs/c.md in turn."""
    monkeypatch.setattr(timeline, "PAGE", 20)
    files = ["src/a.py", "src/b.txt", "docs/c.md"]
    for f in files:
        (tree / f).parent.mkdir(parents=True, exist_ok=True)
    with Store.init(tree) as store:
        for i in range(45):
            (tree / files[i % 3]).write_text(f"version {i}\n")
            store.snapshot(f"Step {i} " + ("Refactor" if i % 5 == 0 else "edit"), task=f"task-{i // 10}")
        yield store


def test_pages_read_only_their_records_and_page_back_to_the_first(long_store: Store, monkeypatch):
    client = client_for(long_store)
    parsed: list[int] = []
    parse = history.parse_record
    monkeypatch.setattr(history, "parse_record", lambda *a, **k: parsed.append(1) or parse(*a, **k))
    first = client.get("/").text
    assert labels(first) == list(range(45, 25, -1))
    assert len(parsed) <= timeline.PAGE + 2  # not the 45 records (the old page read them all)
    assert older_link(first) == "/?before=26"
    second = client.get("/?before=26").text
    assert labels(second) == list(range(25, 5, -1))
    third = client.get(older_link(second) or "").text
    assert labels(third) == list(range(5, 0, -1))
    assert older_link(third) is None and '<a href="/" id="newer">Newest</a>' in third


def test_row_numbers_do_not_move_when_checkpoints_arrive(long_store: Store, tree: Path):
    client = client_for(long_store)
    before = client.get("/").text
    assert re.search(r">#30</span></td><td>.*?Step 29 edit", before)
    (tree / "new.txt").write_text("new\n")
    long_store.snapshot("a new one")
    after = client.get("/").text
    assert labels(after)[0] == 46 and labels(after)[1:] == labels(before)[:-1]
    assert re.search(r">#30</span></td><td>.*?Step 29 edit", after)
    cid = long_store.resolve(":/Step 29 edit").id
    assert re.search(r"<h1>Checkpoint 30 <code>", client.get(f"/c/{cid}").text)


def test_message_search_is_case_blind_and_pages(long_store: Store):
    client = client_for(long_store)
    html = client.get("/?q=refactor").text
    assert labels(html) == [41, 36, 31, 26, 21, 16, 11, 6, 1]


@pytest.mark.parametrize(
    ("pattern", "files"),
    [
        ("src/a.py", {"src/a.py"}),  # a file: the path index
        ("src/", {"src/a.py", "src/b.txt"}),  # a directory
        ("src", {"src/a.py", "src/b.txt"}),
        ("*.py", {"src/a.py"}),  # a glob on names
        ("*/c.*", {"docs/c.md"}),  # a glob on paths
        ("nothing/here", set()),
    ],
)
def test_path_filters_by_file_directory_and_glob(long_store: Store, pattern: str, files: set[str]):
    html = client_for(long_store).get("/", params={"path": pattern}).text
    order = ["src/a.py", "src/b.txt", "docs/c.md"]
    expected = [n for n in range(45, 0, -1) if order[(n - 1) % 3] in files][: timeline.PAGE]
    assert labels(html) == expected
    if not files:
        assert "No checkpoint matches." in html


def test_path_matcher():
    glob = timeline.path_matcher("*.py")
    assert glob(b"a.py") and glob(b"src/deep/a.py") and not glob(b"a.pyc")
    directory = timeline.path_matcher("src/")
    assert directory(b"src/a") and directory(b"src") and not directory(b"srcx/a")


def test_a_tag_a_task_and_a_bad_cursor(long_store: Store):
    long_store.tag(":/Step 12 edit", "v1")
    client = client_for(long_store)
    assert labels(client.get("/?tag=v1").text) == [13]
    assert labels(client.get("/?tag=nope").text) == []
    assert labels(client.get("/?task=task-1").text) == list(range(20, 10, -1))
    assert labels(client.get("/?task=task-1&q=refactor").text) == [16, 11]
    assert labels(client.get("/?before=oops").text)[0] == 45  # the first page, not an error


def test_the_checkpoint_page_links_older_and_newer(long_store: Store):
    client = client_for(long_store)
    cid = long_store.resolve(":/Step 29 edit").id
    html = client.get(f"/c/{cid}").text
    older = long_store.resolve(":/Step 28 edit").id
    newer = long_store.resolve(":/Step 30 Refactor").id
    assert f'<a href="/c/{older}" id="older" rel="prev"' in html
    assert f'<a href="/c/{newer}" id="newer" rel="next"' in html
    newest = client.get(f"/c/{long_store.resolve('latest').id}").text
    assert 'id="newer"' not in newest and "no newer checkpoint" in newest


def test_the_server_turns_nagle_off_so_small_pages_do_not_wait_for_a_delayed_ack():
    import socket

    from snapstore.ui.server import bind

    sock = bind("127.0.0.1", 0)
    try:
        # asyncio sets TCP_NODELAY on accepted sockets only when their proto is TCP (inherited)
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()


def test_a_files_history_lists_its_newest_versions_only(long_store: Store, monkeypatch):
    from snapstore.ui import views

    monkeypatch.setattr(views, "MAX_HISTORY", 4)
    html = client_for(long_store).get("/history?path=src/a.py").text
    assert len(re.findall(r'<tr class="cp"', html)) == 4
    assert "The newest 4 of 15 versions" in html


def test_an_unknown_address_gets_the_page_frame_and_a_way_back(long_store: Store):
    client = client_for(long_store)
    r = client.get("/no/such/page")
    assert r.status_code == 404 and "<h1>Error 404</h1>" in r.text and 'href="/">Back to the timeline' in r.text
    assert client.get("/undo").status_code == 405  # an action, asked with GET
