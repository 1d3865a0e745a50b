"""The checkpoint browser at the HTTP level: every page and action, and every guard.

Starlette's TestClient drives the real application (routes behind the Guard) against a real
LMDB store on disk; the last tests run `snapstore ui` as a process and talk to its uvicorn on
127.0.0.1.  The browser suite (test_ui_browser.py) runs the same flows in Chromium.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed (pip install -e '.[ui]')")
pytest.importorskip("httpx", reason="httpx (for Starlette's TestClient) is not installed")

import warnings  # noqa: E402

from helpers import REPO, subprocess_env  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette now prefers httpx2; httpx still works
    from starlette.testclient import TestClient

from snapstore.store import Store  # noqa: E402
from snapstore.ui.app import create_app  # noqa: E402
from snapstore.ui.security import allowed_hosts, is_loopback  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PORT = 47811
ORIGIN = f"http://127.0.0.1:{PORT}"
TOKEN = "test-token-0123456789"
EVIL = "<script>alert('x')</script>"

APP_V1 = "def greet(name):\n    return 'hello ' + name\n"
APP_V2 = "def greet(name: str) -> str:\n    return f'hello, {name}!'\n"
LONG = "word " * 300


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def ui_store(tree: Path):
    """A store with three checkpoints: two of task fix-login (by an agent), one of a session."""
    write(tree, "src/app.py", APP_V1)
    write(tree, "README.md", "# demo\n")
    with Store.init(tree) as store:
        store.snapshot("initial import", task="fix-login", tags=["start"], metadata={"actor": "user"})
        write(tree, "src/app.py", APP_V2)
        write(tree, "page.html", EVIL + "\n")
        store.snapshot(
            "Edit app " + EVIL,
            task="fix-login",
            metadata={"actor": "agent", "tool_name": "Edit", "tool_use_id": "toolu_01", "note": EVIL},
            conversation=[
                {"role": "user", "content": "type greet " + EVIL},
                {"role": "assistant", "content": [{"type": "text", "text": LONG}]},
            ],
        )
        write(tree, "src/util.py", "X = 1\n")
        store.snapshot("Write util", metadata={"actor": "agent", "tool_name": "Write", "session_id": "sess-42"})
        yield store


def make_client(store: Store, *, login: bool = True, app=None) -> TestClient:
    """A client of ``app``, by default a new UI on 127.0.0.1:PORT whose one login token is TOKEN."""
    app = app or create_app(store, token=TOKEN, host="127.0.0.1", port=PORT)
    client = TestClient(app, base_url=ORIGIN)
    if login:
        assert client.get(f"/?token={TOKEN}").status_code == 200
    return client


@pytest.fixture
def client(ui_store: Store) -> TestClient:
    return make_client(ui_store)


def post(client: TestClient, path: str, data: dict | list | None = None):
    """A same-origin form POST (``data`` as a dict, or a list of pairs for repeated fields)."""
    from urllib.parse import urlencode

    body = urlencode(list(data.items()) if isinstance(data, dict) else (data or []))
    headers = {"origin": ORIGIN, "content-type": "application/x-www-form-urlencoded"}
    return client.post(path, content=body, headers=headers, follow_redirects=False)


def cid(store: Store, ref: str) -> str:
    return store.resolve(ref).id


def text_of(page: str) -> str:
    """What a reader sees: the tags removed, the entities decoded."""
    import html

    return html.unescape(re.sub(r"<[^>]*>", "", page))


def plan_of(html: str) -> str:
    found = re.search(r'name="plan" value="([0-9a-f]+)"', html)
    assert found, "the preview has no confirmation form"
    return found.group(1)


# -- the guards -------------------------------------------------------------------------------


def test_without_the_token_every_request_is_refused(ui_store: Store):
    anon = make_client(ui_store, login=False)
    for path in ("/", "/static/ui.js", "/api/revision", f"/c/{cid(ui_store, 'latest')}", "/timeline.frag"):
        r = anon.get(path)
        assert r.status_code == 403, path
        assert "greet" not in r.text and "initial import" not in r.text
    r = anon.post(f"/c/{cid(ui_store, 'latest')}/tag", data={"name": "x"}, headers={"origin": ORIGIN})
    assert r.status_code == 403
    assert "x" not in ui_store.resolve("latest").tags


def test_a_wrong_token_is_refused_and_sets_no_cookie(ui_store: Store):
    anon = make_client(ui_store, login=False)
    r = anon.get("/?token=" + TOKEN[:-1] + "X")
    assert r.status_code == 403
    assert "set-cookie" not in r.headers
    assert anon.get("/").status_code == 403


def test_the_token_becomes_an_httponly_strict_session_cookie_and_leaves_the_url(ui_store: Store):
    anon = make_client(ui_store, login=False)
    r = anon.get(f"/?q=greet&token={TOKEN}")
    assert r.status_code == 200
    cookie = r.headers["set-cookie"]
    name, _, rest = cookie.partition("=")
    secret = rest.split(";")[0]
    assert name == f"snapstore_ui_{PORT}" and len(secret) >= 43  # a fresh 256-bit secret...
    assert secret != TOKEN and TOKEN not in cookie  # ...not the login token
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Domain" not in cookie
    assert 'content="0;url=/?q=greet"' in r.text and TOKEN not in r.text
    assert anon.get("/").status_code == 200
    # the cookie of another port's UI is not this one's
    other = TestClient(create_app(ui_store, host="127.0.0.1", port=PORT + 1), base_url=f"http://127.0.0.1:{PORT + 1}")
    assert other.get("/", headers={"cookie": f"snapstore_ui_{PORT + 1}={secret}"}).status_code == 403


def test_the_login_page_moves_on_within_this_site_only(ui_store: Store):
    guard = create_app(ui_store, host="127.0.0.1", port=PORT)
    for path, target in (("//evil.example/x", "/"), ("/\\evil.example/x", "/"), ("/c/abc", "/c/abc")):
        token = guard.credentials.add_login()
        scope = {"type": "http", "method": "GET", "path": path, "query_string": f"token={token}".encode(), "headers": [(b"host", f"127.0.0.1:{PORT}".encode())]}
        status, _, body = guard.check(scope)
        assert status == 200 and f'content="0;url={target}"'.encode() in body, path


def test_a_login_token_works_once(ui_store: Store):
    app = create_app(ui_store, token=TOKEN, host="127.0.0.1", port=PORT)
    first = make_client(ui_store, login=False, app=app)
    assert first.get(f"/?token={TOKEN}").status_code == 200
    again = make_client(ui_store, login=False, app=app)
    r = again.get(f"/?token={TOKEN}")
    assert r.status_code == 403 and "set-cookie" not in r.headers and "used already" in r.text
    assert again.get("/").status_code == 403
    assert first.get("/").status_code == 200  # the session it opened stays


def test_a_request_another_site_or_port_started_is_refused(client: TestClient, ui_store: Store):
    # A page of another port on the same address is "same-site" for the browser (ports do not
    # count): it sends the cookie, and Sec-Fetch-Site tells the UI who asked.
    for site in ("same-site", "cross-site"):
        r = client.get("/", headers={"sec-fetch-site": site})
        assert r.status_code == 403 and "initial import" not in r.text, site
    for site in ("same-origin", "none"):
        assert client.get("/", headers={"sec-fetch-site": site}).status_code == 200, site


def test_the_login_link_may_come_from_another_site(ui_store: Store):
    # The browser's launch page is a file:// page: its move to the login URL is cross-site.
    anon = make_client(ui_store, login=False)
    assert anon.get(f"/?token={TOKEN}", headers={"sec-fetch-site": "cross-site"}).status_code == 200
    assert anon.get("/", headers={"sec-fetch-site": "same-origin"}).status_code == 200


def test_login_tokens_expire_and_sessions_are_bounded():
    from snapstore.ui.security import Credentials

    now = [100.0]
    creds = Credentials(clock=lambda: now[0])
    short = creds.add_login(ttl=60)
    late = creds.add_login(ttl=60)
    used: list[str] = []
    lasting = creds.add_login(on_use=lambda: used.append("x"))
    assert creds.redeem(short) is not None
    now[0] += 61
    assert creds.redeem(late) is None  # expired
    assert creds.redeem("not-a-token") is None
    session = creds.redeem(lasting)
    assert session is not None and used == ["x"]
    assert creds.redeem(lasting) is None and used == ["x"]  # spent
    assert creds.session_valid(session) and not creds.session_valid("") and not creds.session_valid(lasting)
    for _ in range(Credentials.MAX_SESSIONS):
        creds.redeem(creds.add_login())
    assert not creds.session_valid(session)  # the oldest was forgotten


def test_a_foreign_host_header_is_refused(client: TestClient):
    # DNS rebinding: a page of evil.example whose name resolves to 127.0.0.1 sends its own Host.
    for host in ("evil.example", f"evil.example:{PORT}", f"127.0.0.1:{PORT + 1}", f"127.0.0.1.evil.example:{PORT}", ""):
        r = client.get("/", headers={"host": host})
        assert r.status_code == 403, host
        assert "initial import" not in r.text
    for host in (f"localhost:{PORT}", f"127.0.0.1:{PORT}", f"[::1]:{PORT}"):
        assert client.get("/", headers={"host": host}).status_code == 200, host


def test_a_post_needs_this_origin(client: TestClient, ui_store: Store):
    target = f"/c/{cid(ui_store, 'latest')}/tag"
    for origin in (None, "null", "http://evil.example", f"http://localhost:{PORT + 1}", f"https://127.0.0.1:{PORT}"):
        headers = {} if origin is None else {"origin": origin}
        r = client.post(target, data={"name": "sneaky"}, headers=headers, follow_redirects=False)
        assert r.status_code == 403, origin
    assert "sneaky" not in ui_store.resolve("latest").tags
    assert post(client, target, {"name": "fine"}).status_code == 303
    assert "fine" in ui_store.resolve("latest").tags


def test_changes_are_post_only(client: TestClient, ui_store: Store, tree: Path):
    old = cid(ui_store, "latest~2")
    for path in (f"/c/{old}/restore", f"/c/{old}/restore/preview", "/undo", "/undo/preview", f"/c/{old}/tag?name=x"):
        assert client.get(path).status_code == 405, path
    for method in ("PUT", "DELETE", "PATCH"):
        assert client.request(method, f"/c/{old}/restore", headers={"origin": ORIGIN}).status_code == 405
    assert (tree / "src/app.py").read_text() == APP_V2
    assert ui_store.operations() == []


def test_every_response_carries_the_security_headers(client: TestClient):
    for path in ("/", "/static/ui.js", "/nope"):
        h = client.get(path).headers
        assert "script-src 'self'" in h["content-security-policy"]
        assert "unsafe-inline" not in h["content-security-policy"]
        assert h["x-frame-options"] == "DENY"
        assert h["x-content-type-options"] == "nosniff"
        assert h["referrer-policy"] == "same-origin"  # no-referrer would make POSTs "Origin: null"


def test_host_rules():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("example.com")
    hosts = allowed_hosts("127.0.0.1", 8765)
    assert "127.0.0.1:8765" in hosts and "localhost:8765" in hosts
    assert "127.0.0.1" not in hosts and "evil.example:8765" not in hosts
    assert "10.0.0.7:8765" in allowed_hosts("10.0.0.7", 8765)
    assert allowed_hosts("127.9.8.7", 8765) == {"127.9.8.7:8765"}  # a private address: its own name only
    assert "[fd00::5]:8765" in allowed_hosts("fd00::5", 8765)


def test_the_peer_check_knows_who_is_connected_and_a_closed_socket_is_nobodys():
    import socket
    import time

    from snapstore.platform.tcp import NOBODY, _ask_kernel, _lookup, socket_uid
    from snapstore.ui.peer import PeerCheck, random_loopback, tables_readable

    if not tables_readable():
        pytest.skip("this system does not say who owns a TCP connection (Linux's /proc/net/tcp; masked or not Linux)")
    listener = socket.socket()
    listener.bind((random_loopback(), 0))
    listener.listen()
    client = socket.create_connection(listener.getsockname())
    conn, _ = listener.accept()
    try:
        peer, served = client.getsockname(), listener.getsockname()
        mine = PeerCheck(frozenset({os.geteuid()}), remote_ok=False)
        assert mine(peer, served)
        assert not PeerCheck(frozenset({os.geteuid() + 1}), remote_ok=False)(peer, served)
        # both ways of asking (sock_diag, the /proc tables) agree
        assert _lookup(*_addresses(peer, served)) == os.geteuid()
        assert _ask_kernel(*_addresses(peer, served)) in (os.geteuid(), None)  # None: no sock_diag
        client.close()  # now no process holds the peer's socket (orphaned, then time-wait)
        deadline = time.monotonic() + 10
        while socket_uid(*_addresses(peer, served)) != NOBODY and time.monotonic() < deadline:
            time.sleep(0.05)
        assert socket_uid(*_addresses(peer, served)) == NOBODY  # listed with uid 0: not root's
        assert _lookup(*_addresses(peer, served)) == NOBODY
        assert _ask_kernel(*_addresses(peer, served)) in (NOBODY, None)
        assert not mine(peer, served) and not PeerCheck(frozenset({0, os.geteuid()}), remote_ok=True)(peer, served)
    finally:
        conn.close()
        listener.close()
    # no local socket at all: another machine, admitted only when not serving loopback
    assert not mine(("127.0.0.1", 9), served)
    assert PeerCheck(frozenset(), remote_ok=True)(("192.0.2.7", 5555), served)
    assert not PeerCheck(frozenset(), remote_ok=True)(("127.0.0.1", 9), served)
    assert not mine(None, served) and not mine(("testclient", 50000), served)


def _addresses(peer, served):
    import ipaddress

    return (ipaddress.ip_address(peer[0]), peer[1]), (ipaddress.ip_address(served[0]), served[1])


def test_where_only_127_0_0_1_answers_the_ui_falls_back_to_it_with_a_warning(monkeypatch):
    import errno
    import socket

    from snapstore.errors import UsageError
    from snapstore.ui import server

    real = server.bind

    def bind(host: str, port: int) -> socket.socket:
        if host != "127.0.0.1":  # as on macOS, where lo0 has 127.0.0.1 only
            try:
                raise OSError(errno.EADDRNOTAVAIL, "Can't assign requested address")
            except OSError as exc:
                raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
        return real(host, port)

    monkeypatch.setattr(server, "bind", bind)
    said: list[str] = []
    sock, host = server.bind_ui(None, 0, said.append)
    sock.close()
    assert host == "127.0.0.1"
    assert len(said) == 1 and "listening on 127.0.0.1, whose cookies" in said[0]


def test_a_port_taken_on_every_address_is_an_error_not_a_fallback():
    import socket

    from snapstore.errors import UsageError
    from snapstore.ui.server import bind_ui

    taken = socket.socket()
    taken.bind(("0.0.0.0", 0))  # every address, this port
    taken.listen()
    said: list[str] = []
    try:
        with pytest.raises(UsageError, match="cannot listen on 127"):
            bind_ui(None, taken.getsockname()[1], said.append)
    finally:
        taken.close()
    assert said == []
    sock, host = bind_ui(None, 0, said.append)  # a free port: a private address, no warning
    sock.close()
    assert host.startswith("127.") and not host.startswith("127.0.") and said == []


def test_the_users_served_are_the_owner_and_root(monkeypatch):
    from snapstore.ui import peer

    monkeypatch.setattr(peer.os, "geteuid", lambda: 1234)
    monkeypatch.setenv("SUDO_UID", "1000")
    assert peer.trusted_uids() == {1234, 0}  # SUDO_UID means nothing to a user who is not root
    monkeypatch.setattr(peer.os, "geteuid", lambda: 0)
    assert peer.trusted_uids() == {0, 1000}  # root through sudo: also the user who ran it
    monkeypatch.setenv("SUDO_UID", "x")
    assert peer.trusted_uids() == {0}


def test_random_loopback_addresses_avoid_the_shared_ones():
    import ipaddress

    from snapstore.ui.peer import random_loopback

    seen = {random_loopback() for _ in range(200)}
    assert len(seen) > 190
    for address in seen:
        ip = ipaddress.ip_address(address)
        assert ip.is_loopback and not address.startswith("127.0.") and not address.endswith((".0", ".255"))


# -- escaping and paths -----------------------------------------------------------------------


def only_our_script(html: str) -> None:
    rest = re.sub(r"<script src=\"/static/(ui|since)\.js\?v=[0-9a-f]+\" defer></script>", "", html, count=2)
    assert "<script" not in rest, "a page must load no script but /static/ui.js and /static/since.js"
    assert "<script>alert" not in html
    assert "onerror=" not in html.replace("&#x27;", "'")


def test_file_contents_and_every_text_are_escaped(client: TestClient, ui_store: Store):
    two = cid(ui_store, "latest~1")
    pages = [
        "/",
        "/?safety=1&q=app",
        f"/c/{two}",
        f"/c/{two}?view=split",
        f"/c/{two}/file?path=page.html",
        "/history?path=page.html",
        f"/compare?a={cid(ui_store, 'latest~2')}&b={two}",
        "/timeline.frag",
    ]
    for path in pages:
        r = client.get(path)
        assert r.status_code == 200, path
        only_our_script(r.text)
    page = client.get(f"/c/{two}/file?path=page.html").text
    assert EVIL in text_of(page)  # shown as text
    assert "Edit app &lt;script&gt;" in client.get("/").text


def test_paths_from_requests_never_leave_the_store(client: TestClient, ui_store: Store, tree: Path):
    secret = tree.parent / "secret.txt"
    secret.write_text("TOP SECRET\n")
    two = cid(ui_store, "latest~1")
    for query in ("path=../secret.txt", "p=..%2Fsecret.txt", "p=%2Fetc%2Fpasswd", "path=/etc/passwd", "path=.snapstore/data.mdb"):
        r = client.get(f"/c/{two}/file?{query}")
        assert r.status_code == 404, query
        assert "TOP SECRET" not in r.text and "root:" not in r.text
        r = client.get(f"/c/{two}/raw?{query}")
        assert r.status_code == 404 and b"TOP SECRET" not in r.content
    for name in ("..%2Fapp.py", "%2e%2e%2fapp.py", "..%2F..%2Fstore.py", "app.py", "ui.py"):
        assert client.get(f"/static/{name}").status_code == 404
    r = post(client, f"/c/{cid(ui_store, 'latest~2')}/restore/preview", [("p", "../secret.txt")])
    assert r.status_code == 200 and "Nothing would change" in r.text
    assert secret.read_text() == "TOP SECRET\n"


def test_unknown_things_get_an_error_page_not_a_traceback(client: TestClient):
    r = client.get("/c/ffffffffffff")
    assert r.status_code == 404 and "Traceback" not in r.text
    assert 'role="alert"' in r.text
    assert client.get("/compare?a=nonesuch").status_code == 404
    assert client.get("/c/latest/conversation.json").status_code == 404  # the latest has none


# -- the pages --------------------------------------------------------------------------------


def test_the_timeline_groups_by_task_and_session_and_shows_who(client: TestClient):
    html = client.get("/").text
    assert "task: <strong>fix-login</strong>" in html
    assert "session: <strong>sess-42</strong>" in html
    listed = html.split('id="timeline"')[1]
    assert listed.index("sess-42") < listed.index("fix-login")  # newest first
    assert "agent · Edit" in html and "agent · Write" in html and ">user<" in html
    assert 'class="tag"' in html and "#start" in html
    assert re.search(r'<span class="add">\+1</span> <span class="mod">~1</span> <span class="del">-0</span>', html)
    assert "<time datetime=" in html and '>Who</th>' in html


def test_the_timeline_filters(client: TestClient, ui_store: Store):
    def messages(query: str) -> set[str]:
        html = client.get("/timeline.frag?" + query).text
        return set(re.findall(r'<td class="msg"><a href="[^"]+">([^<]+)</a>', html))

    assert messages("") == {"initial import", "Edit app &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;", "Write util"}
    assert messages("q=WRITE") == {"Write util"}
    assert messages("path=src/app.py") == {"initial import", "Edit app &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;"}
    assert messages("task=fix-login") == {"initial import", "Edit app &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;"}
    assert messages("tag=start") == {"initial import"}
    assert messages("q=nothing-like-this") == set()
    assert "No checkpoint matches" in client.get("/timeline.frag?q=nothing-like-this").text


def test_a_checkpoint_page_shows_record_files_diffs_and_conversation(client: TestClient, ui_store: Store):
    two = ui_store.resolve("latest~1")
    html = client.get(f"/c/{two.id}").text
    assert two.id in html and "toolu_01" in html and "fix-login" in html
    assert "src/app.py" in html and "+2 -2" in html and "page.html" in html
    # the unified diff: removed and added lines with their markers, highlighted (Pygments)
    assert re.search(r'<tr class="del"><td class="ln">1</td><td class="ln"></td><td class="mk">-</td>', html)
    assert re.search(r'<tr class="add"><td class="ln"></td><td class="ln">1</td><td class="mk">\+</td>', html)
    assert '<span class="k">def</span>' in html
    split = client.get(f"/c/{two.id}?view=split").text
    assert 'class="diff split hl"' in split and 'class="diff unified' not in split
    # the conversation: roles, the long message collapsed
    assert "role-user" in html and "role-assistant" in html
    assert "<details><summary>" in html and "(1500 characters)" in html
    assert "type greet &lt;script&gt;" in html


def test_a_change_deep_in_a_long_file_is_shown_highlighted(client: TestClient, ui_store: Store, tree: Path):
    # Only the lines a diff shows are lexed (from a little above): they must be the right ones.
    body = "".join(f"def f{i}(x):\n    return {i}\n" for i in range(300))
    write(tree, "long.py", body)
    ui_store.snapshot("long")
    write(tree, "long.py", body.replace("    return 280\n", "    return 'changed'\n"))
    cp = ui_store.snapshot("changed")
    html = client.get(f"/c/{cp.id}").text
    added = re.findall(r'<tr class="add"><td class="ln"></td><td class="ln">(\d+)</td><td class="mk">\+</td><td class="code">(.*?)</td></tr>', html)
    assert [(n, text_of(code)) for n, code in added] == [("562", "    return 'changed'")]
    assert added[0][1].startswith('    <span class="k">return</span>')
    context = re.findall(r'<tr class="ctx"><td class="ln">(\d+)</td><td class="ln">\d+</td><td class="mk"> </td><td class="code">(.*?)</td></tr>', html)
    assert ("561", "def f280(x):") in [(n, text_of(code)) for n, code in context]


def test_the_file_at_a_checkpoint_and_its_raw_download(client: TestClient, ui_store: Store):
    one = cid(ui_store, "latest~2")
    html = client.get(f"/c/{one}/file?path=src/app.py").text
    assert "return 'hello ' + name" in text_of(html) and 'id="L2"' in html  # the old version, numbered
    raw = client.get(f"/c/{one}/raw?p=src/app.py")
    assert raw.content == APP_V1.encode()
    assert raw.headers["content-disposition"].startswith("attachment;")
    assert raw.headers["content-type"] == "application/octet-stream"


def test_a_files_history(client: TestClient, ui_store: Store):
    html = client.get("/history?path=src/app.py").text
    assert html.count('<tr class="cp"') == 2
    assert "initial import" in html and "Edit app" in html and "Write util" not in html
    assert "changed in no checkpoint" in client.get("/history?path=nope.txt").text


def test_compare_two_checkpoints_and_a_checkpoint_with_the_working_tree(client: TestClient, ui_store: Store, tree: Path):
    one, three = cid(ui_store, "latest~2"), cid(ui_store, "latest")
    html = client.get(f"/compare?a={one}&b={three}").text
    assert "3 paths differ" in html and "src/util.py" in html and "page.html" in html
    write(tree, "src/app.py", "print('unsaved')\n")
    html = client.get(f"/compare?a={three}").text
    assert "the working tree" in html and "1 path differs" in html and "print('unsaved')" in text_of(html)
    assert f'href="/compare?a={three}&amp;view=split"' in html  # the view toggle keeps the sides
    assert "0 paths differ" in client.get("/compare?a=%231&b=%231").text


def test_a_path_that_is_not_utf8_round_trips_through_links(client: TestClient, ui_store: Store, tree: Path):
    name = b"caf\xe9 & <b>.txt"
    with open(os.path.join(os.fsencode(tree), name), "wb") as f:
        f.write(b"latin-1 name\n")
    cp = ui_store.snapshot("odd name")
    html = client.get(f"/c/{cp.id}").text
    link = re.search(r'href="(/c/[0-9a-f]+/file\?p=[^"]+)"', html)
    assert link and "caf\\xe9 &amp; &lt;b&gt;.txt" in html
    page = client.get(link.group(1).replace("&amp;", "&"))
    assert page.status_code == 200 and "latin-1 name" in page.text
    assert client.get(link.group(1).replace("&amp;", "&").replace("/file?", "/raw?")).content == b"latin-1 name\n"


def test_the_conversation_download_is_rewinds_conversation(client: TestClient, ui_store: Store):
    two = cid(ui_store, "latest~1")
    r = client.get(f"/c/{two}/conversation.json")
    assert r.status_code == 200 and r.headers["content-disposition"].startswith("attachment;")
    assert json.loads(r.content) == ui_store.rewind(two, files=False).conversation


# -- the actions ------------------------------------------------------------------------------


def test_restore_the_whole_tree_preview_confirm_then_undo(client: TestClient, ui_store: Store, tree: Path):
    one = cid(ui_store, "latest~2")
    preview = post(client, f"/c/{one}/restore/preview")
    assert preview.status_code == 200
    assert "would overwrite</span> <code>src/app.py</code>" in preview.text
    assert "would delete</span> <code>src/util.py</code>" in preview.text
    assert (tree / "src/app.py").read_text() == APP_V2 and ui_store.operations() == []  # a dry run
    plan = plan_of(preview.text)
    assert post(client, f"/c/{one}/restore", {"plan": plan}).status_code == 400  # no confirmation
    assert (tree / "src/app.py").read_text() == APP_V2
    done = post(client, f"/c/{one}/restore", {"plan": plan, "confirm": "yes"})
    assert done.status_code == 200 and 'id="result"' in done.text and 'action="/undo/preview"' in done.text
    assert (tree / "src/app.py").read_text() == APP_V1 and not (tree / "src/util.py").exists()
    undo = post(client, "/undo/preview")
    assert "would create</span> <code>src/util.py</code>" in undo.text
    assert "no checkpoint holds" not in undo.text  # the tree equals the restored checkpoint
    assert not (tree / "src/util.py").exists()
    assert post(client, "/undo", {"plan": plan_of(undo.text), "confirm": "yes"}).status_code == 200
    assert (tree / "src/app.py").read_text() == APP_V2 and (tree / "src/util.py").read_text() == "X = 1\n"
    assert [op.kind for op in ui_store.operations()] == ["undo", "restore"]
    assert "op 2" in client.get("/ops").text


def test_a_confirmation_of_a_stale_plan_restores_nothing(client: TestClient, ui_store: Store, tree: Path):
    one = cid(ui_store, "latest~2")
    plan = plan_of(post(client, f"/c/{one}/restore/preview").text)
    write(tree, "late.txt", "written after the preview\n")  # the plan now also deletes late.txt
    r = post(client, f"/c/{one}/restore", {"plan": plan, "confirm": "yes"})
    assert r.status_code == 200 and "changed since the preview" in r.text
    assert "late.txt" in r.text and "unsaved work: kept in the safety checkpoint" in r.text
    assert (tree / "late.txt").exists() and (tree / "src/app.py").read_text() == APP_V2
    assert ui_store.operations() == []


def test_restore_selected_files_only(client: TestClient, ui_store: Store, tree: Path):
    one = cid(ui_store, "latest~2")
    preview = post(client, f"/c/{one}/restore/preview", [("p", "src/app.py")])
    assert "src/util.py" not in preview.text.split('class="confirmbar"')[1]
    r = post(client, f"/c/{one}/restore", [("p", "src/app.py"), ("plan", plan_of(preview.text)), ("confirm", "yes")])
    assert r.status_code == 200
    assert (tree / "src/app.py").read_text() == APP_V1
    assert (tree / "src/util.py").exists() and (tree / "page.html").exists()


def test_tag_and_untag(client: TestClient, ui_store: Store):
    two = cid(ui_store, "latest~1")
    r = post(client, f"/c/{two}/tag", {"name": "reviewed"})
    assert r.status_code == 303 and r.headers["location"] == f"/c/{two}?tagged=reviewed"
    assert ui_store.resolve("reviewed").id == two
    shown = client.get(r.headers["location"]).text
    assert "#reviewed" in shown and '<p class="done" role="status">Tagged this checkpoint #reviewed.</p>' in shown
    # a bad name is said on the checkpoint's own page, which stays whole
    bad = post(client, f"/c/{two}/tag", {"name": "bad tag!"})
    assert bad.status_code == 400 and "<h1>Checkpoint 2" in bad.text and "Changed files" in bad.text
    assert re.search(r'<p class="error" role="alert">Not done: [^<]*tag', bad.text)
    assert post(client, f"/c/{two}/untag", {"name": "reviewed"}).status_code == 303
    assert "reviewed" not in ui_store.resolve(two).tags
    r = post(client, f"/c/{two}/untag", {"name": "reviewed"})
    assert r.status_code == 404 and "no tag" in r.text and "<h1>Checkpoint 2" in r.text


def test_live_updates_see_new_checkpoints_and_tags(client: TestClient, ui_store: Store, tree: Path):
    before = client.get("/api/revision").json()["revision"]
    assert f'data-revision="{before}"' in client.get("/").text
    write(tree, "new.txt", "new\n")
    ui_store.snapshot("made while the page was open")
    after = client.get("/api/revision").json()["revision"]
    assert after != before
    assert "made while the page was open" in client.get("/timeline.frag").text
    ui_store.tag("latest", "later")
    assert client.get("/api/revision").json()["revision"] != after


# -- the command ------------------------------------------------------------------------------


def test_help_does_not_import_the_web_stack():
    code = (
        "import sys, io, contextlib\n"
        "from snapstore.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help']); main(['ui', '--help'])\n"
        "print(sorted(m for m in ('starlette', 'uvicorn', 'pygments') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_ui_without_the_extra_says_how_to_install_it(run_cli, ui_store: Store, tree: Path, monkeypatch):
    from snapstore.ui import server

    monkeypatch.setattr(server, "missing_dependencies", lambda: ["starlette"])
    result = run_cli("ui", "--no-browser", cwd=tree)
    assert result.code == 2
    assert result.err.strip() == "snapstore: error: snapstore ui needs starlette: pip install 'snapstore[ui]'"


def test_snapstore_ui_serves_its_printed_url_on_a_private_loopback_address(ui_store: Store, tree: Path):
    import httpx

    ui_store.close()
    env = subprocess_env(CI="1", DISPLAY=":0")
    proc = subprocess.Popen(
        [sys.executable, "-m", "snapstore", "ui", "--port", "0"],
        cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        line = proc.stdout.readline().strip()
        found = re.fullmatch(r"open (http://(127\.\d+\.\d+\.\d+):(\d+))/\?token=[\w-]{43}", line)
        assert first.startswith("snapstore ui for ") and found, line
        base, address, port = found.group(1), found.group(2), int(found.group(3))
        assert not address.startswith("127.0.")  # not 127.0.0.1, whose cookies every local server gets
        assert _listening(port) == [address]  # that address only
        url = line.removeprefix("open ")
        with httpx.Client(base_url=base, timeout=30) as http:
            assert http.get("/").status_code == 403
            assert http.get(url).status_code == 200
            page = http.get("/")
            assert page.status_code == 200 and "initial import" in page.text
            assert http.get("/", headers={"host": f"evil.example:{port}"}).status_code == 403
            assert http.get("/", headers={"host": f"127.0.0.1:{port}"}).status_code == 403  # its own name only
        # the link is spent: the next one is printed for another browser, and works once
        again = proc.stdout.readline().strip()
        assert again.startswith("(the link works once")
        again = proc.stdout.readline().strip()
        following = re.search(r"open (http://\S+/\?token=[\w-]{43})\)$", again)
        assert following and following.group(1) != url, again
        with httpx.Client(timeout=30) as http:
            assert http.get(url).status_code == 403
            assert http.get(following.group(1)).status_code == 200
    finally:
        proc.terminate()
        proc.wait(30)
    assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")


def test_the_browser_gets_a_private_page_that_is_gone_when_the_ui_stops(ui_store: Store, tree: Path, tmp_path: Path):
    import time

    ui_store.close()
    fake = tmp_path / "browser"
    fake.write_text('#!/bin/sh\necho "$1" > "$0.opened"\n')  # opens nothing: the page stays unused
    fake.chmod(0o755)
    private = tmp_path / "tmp"
    private.mkdir()
    env = subprocess_env(BROWSER=str(fake), TMPDIR=str(private))
    for name in ("CI", "SNAPSTORE_NO_BROWSER", "XDG_RUNTIME_DIR"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, "-m", "snapstore", "ui"], cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        printed = proc.stdout.readline().strip().removeprefix("open ")
        opened = Path(str(fake) + ".opened")
        deadline = time.monotonic() + 30
        while not opened.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        uri = opened.read_text().strip()
        page = Path(uri.removeprefix("file://"))
        assert uri.startswith("file://") and page.parent.parent == private and "token" not in uri
        assert page.stat().st_mode & 0o777 == 0o600 and page.parent.stat().st_mode & 0o777 == 0o700
        login = re.search(r'url=(http://[^"]+/\?token=[\w-]{43})"', page.read_text())
        assert login and login.group(1) != printed  # a token of its own
    finally:
        proc.terminate()
        proc.wait(30)
    assert not page.parent.exists()  # removed when the UI stopped


def _listening(port: int) -> list[str]:
    """The local addresses listening on TCP ``port`` (from /proc/net/tcp and tcp6)."""
    import ipaddress

    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                addr, hexport = local.split(":")
                if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                    raw = bytes.fromhex(addr)
                    # /proc stores each 32-bit word in host (little-endian) order
                    raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                    found.append(str(ipaddress.ip_address(raw)))
    return found


def test_another_host_than_loopback_is_served_with_a_warning(ui_store: Store, monkeypatch):
    from snapstore.ui import server

    class Stop(Exception):
        pass

    def no_server(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(server, "_prepare", no_server)  # stop right after the checks: bind nothing
    said: list[str] = []
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost", "0.0.0.0", "192.168.1.5"):
        with pytest.raises(Stop):
            server.serve(ui_store, host=host, open_browser=False, echo=said.append, warn=said.append)
    assert len(said) == 2
    assert said[0].startswith("listening on 0.0.0.0: other machines") and said[1].startswith("listening on 192.168.1.5:")


def test_ipv6_loopback(ui_store: Store):
    import httpx

    from snapstore.errors import UsageError
    from snapstore.ui.server import background

    try:
        running = background(ui_store, host="::1")
        served = running.__enter__()
    except UsageError as exc:  # no IPv6 on this machine
        pytest.skip(f"cannot listen on [::1]: {exc}")
    try:
        assert served.url.startswith(f"http://[::1]:{served.port}/?token=")
        with httpx.Client(timeout=30) as http:
            assert http.get(served.url).status_code == 200
            assert "initial import" in http.get(f"http://[::1]:{served.port}/").text
    finally:
        running.__exit__(None, None, None)
