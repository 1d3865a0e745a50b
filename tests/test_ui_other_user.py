"""The UI's credential against a second local user (issue 22, class 4), with a real second uid.

Loopback is shared by every local user: browsers send a cookie of a host to every port of it,
and command lines are world-readable.  These tests create a user (they run as root; otherwise
they are skipped with the reason) whose processes play the attacker, run the UI as the owner
and the owner's browser in Debian's headless Chromium (``tests/ui_browser.py``), and check that
nothing the other user can see or receive lets it read a 0600 file from a checkpoint or
restore the owner's tree.
"""

from __future__ import annotations

import json
import os
import pwd
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import second_user, subprocess_env

pytest.importorskip("starlette", reason="the ui extra is not installed (pip install -e '.[ui]')")
pytest.importorskip("httpx", reason="httpx is not installed")

import httpx  # noqa: E402
from platform_marks import needs_tcp_owners
from ui_browser import launch, unavailable  # noqa: E402

from snapstore.store import Store  # noqa: E402
from snapstore.ui.server import Running, background  # noqa: E402

#: The other user's interpreter: the system one (the test's own lives under /root).
PYTHON = "/usr/bin/python3"
SECRET = "TOP SECRET: the owner's 0600 file\n"
TOKEN_LIKE = re.compile(r"[A-Za-z0-9_-]{32,}")


class Other:
    """A second local user, created for these tests: runs Python code as that user."""

    def __init__(self, name: str):
        entry = pwd.getpwnam(name)
        self.name, self.uid, self.gid = name, entry.pw_uid, entry.pw_gid

    def popen(self, code: str, *args: str) -> subprocess.Popen[str]:
        """``python3 -I -c code args`` as this user (no groups, a bare environment)."""
        return subprocess.Popen(
            [PYTHON, "-I", "-c", code, *args],
            user=self.uid, group=self.gid, extra_groups=[], cwd="/", env={"PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def run(self, code: str, *args: str) -> Any:
        """Run ``code`` to its end as this user; what it printed, as JSON."""
        proc = self.popen(code, *args)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        return json.loads(out)


@pytest.fixture(scope="module")
def other() -> Iterator[Other]:
    if not os.access(PYTHON, os.X_OK):
        pytest.skip(f"needs {PYTHON} to run code as a second user")
    with second_user("snapui") as (name, _uid, _gid):
        yield Other(name)


@pytest.fixture
def owner_store(tree: Path) -> Iterator[Store]:
    """A store whose first checkpoint holds a 0600 file; then the tree moves on."""
    secret = tree / "secret.txt"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    (tree / "app.py").write_text("v1\n")
    with Store.init(tree) as store:
        store.snapshot("with the secret")
        (tree / "app.py").write_text("v2\n")
        store.snapshot("later")
        yield store


# -- the other user's programs ----------------------------------------------------------------

#: A web server on argv[1] (a free port): prints its port, then one JSON line per request (the
#: path and the Cookie header), and answers with argv[2] as an HTML page.
SERVER = r"""
import http.server, json, sys
PAGE = sys.argv[2].encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        print(json.dumps({"path": self.path, "cookie": self.headers.get("Cookie", "")}), flush=True)
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)
    def log_message(self, *args):
        pass
# Threads: Chromium may hold an idle preconnected socket, which would stall a serial server.
http.server.ThreadingHTTPServer.daemon_threads = True
srv = http.server.ThreadingHTTPServer((sys.argv[1], 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""

#: Replays a Cookie header (argv[2]) against the UI at argv[1], as the owner's browser would
#: send it (right Host, right Origin): reads, the raw 0600 file, a tag, a restore.  Prints
#: [[status, body], ...].
REPLAY = r"""
import json, sys, urllib.error, urllib.request
base, cookie, first, secret_path = sys.argv[1:5]
def call(path, data=None):
    headers = {"Cookie": cookie, "Origin": base, "Sec-Fetch-Site": "same-origin",
               "Content-Type": "application/x-www-form-urlencoded"}
    req = urllib.request.Request(base + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return [r.status, r.read().decode("latin-1")]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode("latin-1")]
    except OSError as e:
        return [0, str(e)]
print(json.dumps([
    call("/"),
    call("/c/" + first + "/raw?path=" + secret_path),
    call("/c/" + first + "/tag", b"name=pwned"),
    call("/c/" + first + "/restore", b"confirm=yes&plan=x"),
]))
"""

#: Tries each argv[1:] as a readable file; prints {path: "read" | error name}.
READ_FILES = r"""
import json, sys
out = {}
for path in sys.argv[1:]:
    try:
        with open(path, "rb") as f:
            out[path] = f.read().decode("latin-1")
    except OSError as e:
        out[path] = type(e).__name__
print(json.dumps(out))
"""


class OtherServer:
    """The other user's web server, on ``host``, and the requests it received."""

    def __init__(self, other: Other, host: str, page: str = "<p>hello</p>"):
        self.proc = other.popen(SERVER, host, page)
        assert self.proc.stdout is not None
        self.lines: queue.Queue[str] = queue.Queue()
        first = self.proc.stdout.readline()
        assert first.strip().isdigit(), self.proc.stderr.read() if self.proc.stderr else first
        self.url = f"http://{host}:{int(first)}"
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def requests(self, *paths: str) -> list[dict[str, str]]:
        """Every request received until one for each of ``paths`` came (waits up to 20 s)."""
        got: list[dict[str, str]] = []
        deadline = time.monotonic() + 20
        while not set(paths) <= {r["path"] for r in got} and time.monotonic() < deadline:
            try:
                got.append(json.loads(self.lines.get(timeout=0.2)))
            except queue.Empty:
                pass
        return got

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def browser_reason() -> str | None:
    return unavailable()


def logged_in_browser(tmp_path: Path, running: Running) -> tuple[Any, Any, Any]:
    """The owner's Chromium, logged into the UI through its printed URL."""
    reason = browser_reason()
    if reason:
        pytest.skip(reason)
    playwright, context = launch(tmp_path)
    page = context.pages[0] if context.pages else context.new_page()
    page.goto(running.url)
    page.wait_for_url(re.compile(r"^http://127\.\d+\.\d+\.\d+:\d+/$"))
    page.wait_for_selector("#timeline .cp")
    return playwright, context, page


def ui_cookies(requests: list[dict[str, str]]) -> list[str]:
    return [r["cookie"] for r in requests if "snapstore_ui_" in r["cookie"]]


# -- (1) a server of another user that the browser visits ----------------------------------------


def test_another_users_server_on_127_0_0_1_receives_no_credential(other: Other, owner_store: Store, tmp_path: Path):
    with background(owner_store) as running:
        playwright, context, page = logged_in_browser(tmp_path, running)
        server = OtherServer(other, "127.0.0.1")
        try:
            port = server.url.rsplit(":", 1)[1]
            page.goto(f"{server.url}/visit")
            wanted = ["/visit"]
            # The same server under its other name.  Some sandboxes (CI among them) give
            # Chromium a "localhost" it cannot reach in time; then only the first visit counts.
            from playwright.sync_api import Error as PlaywrightError

            try:
                page.goto(f"http://localhost:{port}/again", timeout=8000, wait_until="commit")
                wanted.append("/again")
            except PlaywrightError:
                pass
            seen = server.requests(*wanted)
        finally:
            server.stop()
            context.close()
            playwright.stop()
    assert set(wanted) <= {r["path"] for r in seen}  # the browser did visit it
    assert all(r["cookie"] == "" for r in seen), seen  # and sent it nothing


@needs_tcp_owners
def test_a_cookie_that_reaches_another_users_server_is_useless_to_that_user(other: Other, owner_store: Store, tmp_path: Path, tree: Path):
    first = owner_store.resolve("latest~1").id
    with background(owner_store) as running:
        playwright, context, page = logged_in_browser(tmp_path, running)
        base = running.url.split("/?")[0]
        # The other user binds another port of the UI's own address (it can read it in
        # /proc/net/tcp); its page also tries to make the browser tag a checkpoint.
        form = (
            f'<form id="f" method="post" action="{base}/c/{first}/tag"><input name="name" value="pwned"></form>'
            '<script>document.getElementById("f").submit()</script>'
        )
        server = OtherServer(other, running.host, form)
        try:
            page.goto(f"{server.url}/visit")
            page.wait_for_url(re.compile(r"/tag$"))
            seen = server.requests("/visit")
        finally:
            server.stop()
            context.close()
            playwright.stop()
        cookies = ui_cookies(seen)
        assert cookies, f"the browser sends a host's cookies to every port of it: {seen}"
        replayed = other.run(REPLAY, base, cookies[0], first, "secret.txt")
        # The same cookie from the owner's own process works: it is the live session...
        with httpx.Client(timeout=30) as http:
            mine = http.get(f"{base}/c/{first}/raw?path=secret.txt", headers={"cookie": cookies[0]})
        assert mine.status_code == 200 and mine.text == SECRET
    # ...and from the other user's processes it opens nothing.
    assert [status for status, _ in replayed] == [403, 403, 403, 403], replayed
    assert all("TOP SECRET" not in body and "with the secret" not in body for _, body in replayed)
    assert "pwned" not in owner_store.resolve("latest~1").tags
    assert owner_store.operations() == [] and (tree / "app.py").read_text() == "v2\n"


# -- (2) what the other user sees of the processes ---------------------------------------------------


FAKE_BROWSER = """#!/bin/sh
# Stands in for a browser: records its pid and stays alive, so its command line can be read.
echo "$$" > "$SNAPSTORE_TEST_BROWSER_PID.tmp" && mv "$SNAPSTORE_TEST_BROWSER_PID.tmp" "$SNAPSTORE_TEST_BROWSER_PID"
sleep 60
"""


def test_command_lines_hold_no_credential(other: Other, owner_store: Store, tree: Path, tmp_path: Path):
    owner_store.close()
    fake = tmp_path / "fake-browser"
    fake.write_text(FAKE_BROWSER)
    fake.chmod(0o755)
    pid_file = tmp_path / "browser.pid"
    env = subprocess_env(BROWSER=str(fake), SNAPSTORE_TEST_BROWSER_PID=str(pid_file))
    for name in ("CI", "SNAPSTORE_NO_BROWSER", "DISPLAY", "WAYLAND_DISPLAY"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "snapstore", "ui"], cwd=tree, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        printed = proc.stdout.readline().strip().removeprefix("open ")
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pid_file.exists(), "snapstore ui did not start the browser named by $BROWSER"
        browser = int(pid_file.read_text())
        paths = [f"/proc/{pid}/{what}" for pid in (proc.pid, browser) for what in ("cmdline", "environ")]
        seen = other.run(READ_FILES, *paths)
        ui_argv, browser_argv = seen[paths[0]].split("\0"), seen[paths[2]].split("\0")
        # cmdline is world-readable, environ is the owner's only
        assert "ui" in ui_argv and str(fake) in browser_argv, seen
        assert seen[paths[1]] == seen[paths[3]] == "PermissionError"
        # Nothing in either command line is a credential, even for the owner...
        base = printed.split("/?")[0]
        candidates = TOKEN_LIKE.findall(seen[paths[0]] + " " + seen[paths[2]])
        with httpx.Client(timeout=30) as http:
            for candidate in candidates:
                r = http.get(f"{base}/?token={candidate}")
                assert r.status_code == 403, candidate
                assert http.get(f"{base}/", headers={"cookie": f"snapstore_ui_{base.rsplit(':', 1)[1]}={candidate}"}).status_code == 403
        # ...the browser was given a file:// page, which the other user cannot read...
        uris = [arg for arg in browser_argv if "://" in arg]
        assert len(uris) == 1 and uris[0].startswith("file:///"), browser_argv
        page_path = uris[0].removeprefix("file://")
        assert other.run(READ_FILES, page_path)[page_path] == "PermissionError"
        with httpx.Client(timeout=30) as http:
            # ...and that works for the owner's browser (once): it moves on to a live login URL.
            html = Path(page_path).read_text()
            login = re.search(r'url=(http://[^"]+)"', html)
            assert login and http.get(login.group(1).replace("&amp;", "&")).status_code == 200
            assert not Path(page_path).exists()  # used: deleted
            assert http.get(printed).status_code == 200  # the printed link is another, still unused
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), 9)
            except ProcessLookupError:
                pass


# -- (3) the one-time token ---------------------------------------------------------------------------


@needs_tcp_owners
def test_a_used_login_link_cannot_be_replayed(other: Other, owner_store: Store, tmp_path: Path):
    with background(owner_store) as running:
        playwright, context, page = logged_in_browser(tmp_path, running)
        try:
            cookie = context.cookies()[0]
            assert running.token not in cookie["value"]  # the session is not the link's token
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["domain"] == running.host
        finally:
            context.close()
            playwright.stop()
        base = running.url.split("/?")[0]
        # Replayed by the owner: spent.
        with httpx.Client(timeout=30) as http:
            r = http.get(running.url)
            assert r.status_code == 403 and "set-cookie" not in r.headers
            assert http.get(f"{base}/").status_code == 403
        # Replayed by the other user, with a link that was never used: refused all the same.
        fresh = running.login_url()
        token = fresh.rsplit("=", 1)[1]
        replayed = other.run(REPLAY.replace('call("/"),', 'call("/?token=" + sys.argv[5]),'), base, "", "x", "x", token)
        assert replayed[0][0] == 403 and "snapstore_ui_" not in replayed[0][1]
        with httpx.Client(timeout=30) as http:
            assert http.get(fresh).status_code == 200  # (it was live: the other user's try did not spend it)
