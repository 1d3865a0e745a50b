"""``snapstore ui --remote NAME``: the checkpoint browser over a remote's cache store, read-only.

On both engines (obstore's in-memory store and a real SeaweedFS): a developer pushes, a teammate
with a store of their own browses the remote.  The pages show the remote's checkpoints under a
banner naming it; there is no working-tree row and no form that changes anything, and every
change route answers 403 without touching the cache, the teammate's store or their tree.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from urllib.parse import urlencode

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed (pip install -e '.[ui]')")
pytest.importorskip("httpx", reason="httpx (for Starlette's TestClient) is not installed")

from remote_helpers import make_store, remote, seaweed  # noqa: E402, F401

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette now prefers httpx2; httpx still works
    from starlette.testclient import TestClient

from snapstore.store import Store  # noqa: E402
from snapstore.ui.app import create_app  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PORT = 47812
ORIGIN = f"http://127.0.0.1:{PORT}"
TOKEN = "remote-token-0123456789"
V1 = "def greet(name):\n    return 'hello ' + name\n"
V2 = "def greet(name: str) -> str:\n    return f'hello, {name}!'\n"
CONVERSATION = [{"role": "user", "content": "add type hints"}, {"role": "assistant", "content": "done"}]
#: Every route that changes something, with a form it would accept.
CHANGES = [
    ("/c/{cid}/restore/preview", {}),
    ("/c/{cid}/restore", {"plan": "0" * 16, "confirm": "yes"}),
    ("/c/{cid}/revert/preview", {}),
    ("/c/{cid}/revert/confirm", {"plan": "0" * 16, "confirm": "yes"}),
    ("/revert/preview", {"task": "fix-login"}),
    ("/revert/confirm", {"task": "fix-login", "plan": "0" * 16, "confirm": "yes"}),
    ("/undo/preview", {}),
    ("/undo", {"plan": "0" * 16, "confirm": "yes"}),
    ("/c/{cid}/tag", {"name": "sneaky"}),
    ("/c/{cid}/untag", {"name": "start"}),
]


@pytest.fixture
def browsed(remote, tmp_path: Path):  # noqa: F811 - the fixture imported above
    """(the teammate's store, the remote's cache store, the developer's checkpoint ids)."""
    with make_store(tmp_path / "dev", {"src/app.py": V1.encode(), "README.md": b"# demo\n"}) as dev:
        first = dev.snapshot("initial import", task="fix-login", tags=["start"], metadata={"actor": "user"})
        (tmp_path / "dev" / "src" / "app.py").write_text(V2)
        second = dev.snapshot("add type hints", task="fix-login", metadata={"actor": "agent"}, conversation=CONVERSATION)
        remote.add_to(dev)
        assert dev.push(task="fix-login").ref_outcome == "moved"
    mate = make_store(tmp_path / "mate", {"mine.txt": b"mine\n"})
    mate.snapshot("the teammate's own work")
    remote.add_to(mate)
    view = mate.remote_view("origin")
    try:
        yield mate, view, (first.id, second.id)
    finally:
        view.close()
        mate.close()


def client_of(view: Store) -> TestClient:
    app = create_app(view, token=TOKEN, host="127.0.0.1", port=PORT, read_only=True, remote="origin")
    client = TestClient(app, base_url=ORIGIN)
    assert client.get(f"/?token={TOKEN}").status_code == 200
    return client


def post(client: TestClient, path: str, data: dict[str, str]):
    headers = {"origin": ORIGIN, "content-type": "application/x-www-form-urlencoded"}
    return client.post(path, content=urlencode(data), headers=headers, follow_redirects=False)


def text_of(page: str) -> str:
    """What a reader sees: the tags removed, the entities decoded."""
    import html

    return html.unescape(re.sub(r"<[^>]*>", "", page))


def forms_that_post(html: str) -> list[str]:
    return re.findall(r'<form[^>]*method="post"[^>]*>', html)


def test_the_timeline_lists_the_remotes_checkpoints_under_a_read_only_banner(browsed):
    mate, view, (first, second) = browsed
    client = client_of(view)
    page = client.get("/").text
    assert "add type hints" in page and "initial import" in page and first in page and second in page
    assert "the teammate&#x27;s own work" not in page and "own work" not in page
    assert 'class="banner read-only"' in page and "<strong>origin</strong>" in page and "Read-only" in page
    assert "remote origin (read-only)" in page  # the header names the remote, not the cache's tree
    # no working-tree row, on the page or its live fragment, and no route for it
    assert 'id="worktree"' not in page and "/here.frag" not in page
    assert 'id="worktree"' not in client.get("/timeline.frag").text
    assert client.get("/here.frag").status_code == 404


def test_a_checkpoint_page_renders_with_no_form_that_changes_anything(browsed):
    _, view, (first, second) = browsed
    client = client_of(view)
    r = client.get(f"/c/{second}")
    assert r.status_code == 200
    page = r.text
    assert "add type hints" in page and "src/app.py" in page and "hello, {name}!" in text_of(page)
    assert "/conversation.json" in page and "done" in page  # the conversation, to read and download
    assert 'class="banner read-only"' in page
    assert forms_that_post(page) == []
    assert "here-note" not in page and "Compare with the working tree" not in page
    assert "Compare with its parent" in page
    for path in (f"/c/{first}", f"/c/{second}/file?path=src/app.py", "/ops", f"/compare?a={first}&b={second}"):
        r = client.get(path)
        assert r.status_code == 200, path
        assert forms_that_post(r.text) == [], path
    assert "Preview restoring this file" not in client.get(f"/c/{second}/file?path=src/app.py").text
    # compare needs both sides: there is no working tree to compare with
    r = client.get(f"/compare?a={first}")
    assert r.status_code == 400 and "no working tree" in r.text


def test_every_change_route_is_refused_and_changes_nothing(browsed, tmp_path: Path):
    mate, view, (first, second) = browsed
    client = client_of(view)
    tags_before = {c.id: c.tags for c in view.checkpoints()}
    for path, form in CHANGES:
        r = post(client, path.format(cid=first), form)
        assert r.status_code == 403, path
        assert "read-only" in r.text and "the remote origin" in r.text, path
        assert 'class="banner read-only"' in r.text
    assert view.operations() == [] and mate.operations() == []
    assert {c.id: c.tags for c in view.checkpoints()} == tags_before
    assert [p.name for p in Path(view.root).iterdir()] == []  # the cache's tree stays empty
    assert (tmp_path / "mate" / "mine.txt").read_text() == "mine\n"
    assert sorted(p.name for p in (tmp_path / "mate").iterdir()) == [".snapstore", "mine.txt"]
    assert [c.message for c in mate.checkpoints()] == ["the teammate's own work"]


def test_the_same_app_without_read_only_offers_the_changes(browsed):
    """The control: the forms and routes the read-only browser leaves out are the normal UI's."""
    mate, _, _ = browsed
    app = create_app(mate, token=TOKEN, host="127.0.0.1", port=PORT)
    client = TestClient(app, base_url=ORIGIN)
    assert client.get(f"/?token={TOKEN}").status_code == 200
    latest = mate.resolve("latest").id
    page = client.get(f"/c/{latest}").text
    assert forms_that_post(page) and "banner" not in page
    assert 'id="worktree"' in client.get("/").text
    assert post(client, f"/c/{latest}/restore/preview", {}).status_code == 200


def test_ui_remote_serves_the_remotes_cache_read_only(browsed, tmp_path: Path, run_cli, monkeypatch):
    """The CLI is thin: ``ui --remote NAME`` opens the remote's cache store (read through) and
    serves it read-only under NAME; the teammate's own store is not what is served."""
    from snapstore.ui import server

    served: list[tuple[str, str | None, list[str]]] = []

    def serve(store: Store, **kwargs: object) -> None:
        served.append((store.root, kwargs.get("remote"), [c.message for c in store.checkpoints()]))  # type: ignore[misc]

    monkeypatch.setattr(server, "serve", serve)
    r = run_cli("ui", "--remote", "origin", "--no-browser", cwd=tmp_path / "mate")
    assert r.code == 0, r.text
    [(root, name, messages)] = served
    assert name == "origin" and "remote-cache" in root
    assert messages == ["add type hints", "initial import"]
    r = run_cli("ui", "--remote", "nowhere", "--no-browser", cwd=tmp_path / "mate")
    assert r.code != 0 and "nowhere" in r.err and "Traceback" not in r.err


def test_served_on_its_address_the_remotes_browser_is_read_only(browsed):
    """What ``serve`` runs (``_prepare`` with ``remote``), through a real uvicorn on 127.x.y.z."""
    import httpx

    from snapstore.ui.server import background

    _, view, (first, _) = browsed
    with background(view, remote="origin") as served, httpx.Client(timeout=30) as http:
        assert http.get(served.url).status_code == 200  # logs in (the session cookie)
        base = f"http://{served.host}:{served.port}"
        page = http.get(f"{base}/").text
        assert 'class="banner read-only"' in page and "initial import" in page and 'id="worktree"' not in page
        headers = {"origin": base, "content-type": "application/x-www-form-urlencoded"}
        r = http.post(f"{base}/c/{first}/restore/preview", content="", headers=headers)
        assert r.status_code == 403 and "read-only" in r.text
    assert view.operations() == []
