"""The checkpoint browser in a real browser: Debian's Chromium, headless, driven by Playwright.

The UI runs on a real uvicorn on a random 127.x.y.z (snapstore.ui.server.background) over a real store;
the tests click and type as a person would and check the tree on disk.  Without
/usr/bin/chromium (``make test`` installs it when it can) or Playwright, every test here is
skipped with the reason.  Screenshots for the docs: ``SNAPSTORE_UI_SCREENSHOTS=docs/img
.venv/bin/python -m pytest tests/test_ui_browser.py -k screenshots``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from ui_browser import browser_page, launch, unavailable

REASON = unavailable()
if REASON:
    pytest.skip(REASON, allow_module_level=True)

from playwright.sync_api import Page, expect  # noqa: E402

from snapstore.store import Store  # noqa: E402
from snapstore.ui.server import Running, background  # noqa: E402

pytestmark = pytest.mark.browser

APP_V1 = "def greet(name):\n    return 'hello ' + name\n"
APP_V2 = "def greet(name: str) -> str:\n    return f'hello, {name}!'\n"
EVIL = "<script>alert('x')</script><img src=x onerror=alert(2)>"


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def ui_store(tree: Path) -> Iterator[Store]:
    write(tree, "src/app.py", APP_V1)
    write(tree, "README.md", "# demo\n")
    with Store.init(tree) as store:
        store.snapshot("initial import", task="fix-login", tags=["start"], metadata={"actor": "user"})
        write(tree, "src/app.py", APP_V2)
        write(tree, "page.html", EVIL + "\n")
        write(tree, "data.bin", "x" * 1536)
        store.snapshot("Edit src/app.py", task="fix-login", metadata={"actor": "agent", "tool_name": "Edit"})
        write(tree, "src/util.py", "X = 1\n")
        store.snapshot("Write src/util.py", task="fix-login", metadata={"actor": "agent", "tool_name": "Write"})
        yield store


@pytest.fixture
def served(ui_store: Store) -> Iterator[Running]:
    with background(ui_store) as running:
        yield running


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    with browser_page(tmp_path) as opened:
        yield opened


def open_ui(page: Page, running: Running) -> None:
    page.goto(running.url)
    page.wait_for_url(re.compile(r"^http://127\.\d+\.\d+\.\d+:\d+/$"))  # the token left the URL
    page.wait_for_selector("#timeline .cp")


def test_timeline_checkpoint_diff_restore_and_undo(page: Page, served: Running, tree: Path):
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    open_ui(page, served)
    rows = page.locator("#timeline tr.cp")
    expect(rows).to_have_count(3)
    expect(page.locator("#timeline")).to_contain_text("task: fix-login")
    expect(page.locator("#timeline")).to_contain_text("agent · Edit")

    # j j Enter opens the second newest checkpoint: its diff, unified then side by side
    page.keyboard.press("j")
    page.keyboard.press("j")
    expect(rows.nth(1)).to_have_class(re.compile(r"\bselected\b"))
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/c/[0-9a-f]{64}$"))
    expect(page.locator("h1")).to_contain_text("Checkpoint 2 ")
    diff = page.locator(".filediff", has_text="src/app.py")
    expect(diff.locator("table.diff.unified")).to_contain_text("return f'hello, {name}!'")
    expect(diff.locator("tr.del td.mk").first).to_have_text("-")
    page.keyboard.press("s")
    page.wait_for_selector("table.diff.split")
    expect(diff.locator("table.diff.split")).to_contain_text("return 'hello ' + name")

    # restore the whole tree to the first checkpoint: preview, nothing changed, confirm
    page.goto(page.url.split("/c/")[0] + "/")
    page.get_by_role("link", name="initial import").click()
    page.locator("#restore-all").click()
    expect(page.locator("ul.plan")).to_contain_text("would overwrite src/app.py")
    expect(page.locator("ul.plan")).to_contain_text("would delete src/util.py")
    assert (tree / "src/app.py").read_text() == APP_V2 and (tree / "src/util.py").exists()
    page.locator("#confirm").click()
    page.wait_for_selector("#result")
    assert (tree / "src/app.py").read_text() == APP_V1
    assert not (tree / "src/util.py").exists() and not (tree / "page.html").exists()

    # the result offers Undo: preview, confirm, and the tree is back
    page.locator("#undo").click()
    expect(page.locator("ul.plan")).to_contain_text("would create src/util.py")
    assert not (tree / "src/util.py").exists()
    page.locator("#confirm").click()
    page.wait_for_selector("#result")
    assert (tree / "src/app.py").read_text() == APP_V2
    assert (tree / "src/util.py").read_text() == "X = 1\n" and (tree / "page.html").exists()
    assert dialogs == []


def test_the_launch_page_logs_the_browser_in_once(page: Page, served: Running):
    # What `snapstore ui` gives the browser: a file:// page (0600, private directory) that moves
    # on to a login URL whose token works once and expires in seconds.
    from snapstore.ui.launch import LaunchPage

    launch_page = LaunchPage()
    try:
        login = served.login_url(ttl=60, on_use=launch_page.remove)
        launch_page.write(login)
        assert launch_page.path.stat().st_mode & 0o777 == 0o600
        assert launch_page.dir.stat().st_mode & 0o777 == 0o700
        page.goto(launch_page.uri)
        page.wait_for_url(re.compile(r"^http://127\.\d+\.\d+\.\d+:\d+/$"))
        page.wait_for_selector("#timeline .cp")
        assert not launch_page.dir.exists()  # used: deleted at once
    finally:
        launch_page.remove()
    page.context.clear_cookies()  # as another browser would be: no session
    response = page.goto(login)  # the same link again: spent
    assert response is not None and response.status == 403
    assert "used already" in page.content() and "initial import" not in page.content()


def test_new_checkpoints_appear_without_a_reload(page: Page, served: Running, ui_store: Store, tree: Path):
    open_ui(page, served)
    page.keyboard.press("j")
    write(tree, "later.txt", "later\n")
    ui_store.snapshot("made while the page was open", task="fix-login")
    expect(page.locator("#timeline")).to_contain_text("made while the page was open")
    expect(page.locator("#timeline tr.cp")).to_have_count(4)
    assert page.url.endswith("/")  # the same page, not reloaded by hand


def test_a_script_in_a_file_is_shown_not_run(page: Page, served: Running, ui_store: Store):
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    open_ui(page, served)
    two = ui_store.resolve("latest~1").id
    base = page.url.rstrip("/")
    page.goto(f"{base}/c/{two}/file?path=page.html")
    expect(page.locator("table.file")).to_contain_text(EVIL)
    page.goto(f"{base}/c/{two}")
    expect(page.locator("#f-1")).to_contain_text(EVIL)
    assert dialogs == []
    assert page.locator("img[src=x]").count() == 0


def test_times_and_sizes_follow_the_browsers_locale(tmp_path: Path, served: Running, ui_store: Store):
    playwright, context = launch(tmp_path, "de-DE")
    try:
        page = context.pages[0] if context.pages else context.new_page()
        open_ui(page, served)
        base = page.url.rstrip("/")
        page.goto(f"{base}/c/{ui_store.resolve('latest~1').id}/file?path=data.bin")
        expect(page.locator("data.size").first).to_have_text("1,5 KiB")  # German decimal comma
        page.goto(f"{base}/c/{ui_store.resolve('latest~1').id}")
        when = page.locator("time").first
        expect(when).not_to_have_text(re.compile(r"^\d{4}-\d\d-\d\d "))  # not the server's format
        expect(when).to_have_text(re.compile(r"\d{4}"))
    finally:
        context.close()
        playwright.stop()


def test_screenshots(page: Page, tmp_path: Path, tree: Path):
    """Screenshots of the timeline and of a diff (into $SNAPSTORE_UI_SCREENSHOTS when set)."""
    out = Path(os.environ.get("SNAPSTORE_UI_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    with Store.init(tree) as store, background(store) as running:
        _demo_history(store, tree)
        open_ui(page, running)
        for _ in range(3):
            page.keyboard.press("j")
        page.screenshot(path=str(out / "timeline.png"))
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r"/c/"))
        page.keyboard.press("s")
        page.wait_for_selector("table.diff.split")
        page.locator("#f-0").scroll_into_view_if_needed()
        page.locator("main").screenshot(path=str(out / "diff.png"))
    for name in ("timeline.png", "diff.png"):
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


def _demo_history(store: Store, tree: Path) -> None:
    """A short agent session on a small project, for the screenshots."""
    (tree / ".gitignore").write_text(".venv/\n")
    write(tree, "src/auth.py", AUTH_V1)
    write(tree, "tests/test_auth.py", "from src.auth import check\n\n\ndef test_ok():\n    assert check('a', 'a')\n")
    store.snapshot("initial import", task="fix-login", tags=["baseline"], metadata={"actor": "user"})
    write(tree, "src/auth.py", AUTH_V2)
    store.snapshot(
        "Edit src/auth.py: compare digests in constant time",
        task="fix-login",
        metadata={"actor": "agent", "tool_name": "Edit", "tool_use_id": "toolu_01A"},
        conversation=[
            {"role": "user", "content": "The login check leaks timing. Fix it."},
            {"role": "assistant", "content": "I'll compare the digests with hmac.compare_digest."},
        ],
    )
    write(tree, "tests/test_auth.py", "from src.auth import check\n\n\ndef test_ok():\n    assert check('a', 'a')\n\n\ndef test_bad():\n    assert not check('a', 'b')\n")
    store.snapshot("Edit tests/test_auth.py: a failing password", task="fix-login", metadata={"actor": "agent", "tool_name": "Edit"})
    write(tree, "notes.txt", "remember to rotate the salt\n")
    store.snapshot("notes", metadata={"actor": "user", "session_id": "shell"}, tags=["reviewed"])


AUTH_V1 = '''"""Password checks."""

import hashlib


def digest(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def check(password: str, expected: str) -> bool:
    return digest(password) == digest(expected)
'''

AUTH_V2 = '''"""Password checks."""

import hashlib
import hmac


def digest(password: str, salt: bytes = b"snapstore") -> bytes:
    return hashlib.pbkdf2_hmac("sha256", password.encode(), salt, 100_000)


def check(password: str, expected: str) -> bool:
    """True when the passwords match (constant time)."""
    return hmac.compare_digest(digest(password), digest(expected))
'''
