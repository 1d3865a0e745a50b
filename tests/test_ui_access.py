"""Looks and access in a real browser (issue 27 req 6): axe-core finds nothing on any page, in
the light and the dark scheme; nothing is wider than a 390 px phone; the dark scheme follows
``prefers-color-scheme``; the keyboard reaches everything (skip link, ``[``/``]``).

Debian's Chromium through Playwright, as tests/test_ui_browser.py.  axe-core comes from npm
(``make axe`` installs it under .venv/npm); without it the axe test is skipped with the reason.
The pages' Content-Security-Policy forbids injected scripts, so this context bypasses CSP
(the app's own CSP is tested in test_ui_http.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ui_browser import CHROMIUM, FLAGS, unavailable

REASON = unavailable()
if REASON:
    pytest.skip(REASON, allow_module_level=True)

from playwright.sync_api import Page, expect  # noqa: E402

from snapstore.store import Store  # noqa: E402
from snapstore.ui.server import Running, background  # noqa: E402

pytestmark = pytest.mark.browser

AXE = Path(__file__).resolve().parent.parent / ".venv" / "npm" / "node_modules" / "axe-core" / "axe.min.js"

APP = '''"""A module with every kind of token: {kinds}."""
import os

CONSTANT = 42  # a comment
PI = 3.14159


class Greeter:
    @staticmethod
    def greet(name: str, times: int = 1) -> str:
        text = f"hello {{name}}" * times
        return text.strip() if name else r"\\n" + os.sep
'''


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def store(tree: Path) -> Iterator[Store]:
    """Checkpoints with code edits, a conversation, tags, a restore and its undo."""
    write(tree, "src/app.py", APP.format(kinds="one"))
    write(tree, "README.md", "# demo\n\nSome *text*.\n")
    write(tree, "notes.txt", "the quick brown fox jumps over the lazy dog\nsecond line stays\n")
    with Store.init(tree) as s:
        s.snapshot("initial import", task="fix-login", tags=["start"], metadata={"actor": "user"})
        # changed words inside names, literals and plain text (the marks are darker than the rows)
        edited = APP.format(kinds="two").replace("42", "43").replace("3.14159", "3.1416").replace("os.sep", "os.path.sep")
        write(tree, "src/app.py", edited.replace("return text.strip()", "return self_check(text).strip()"))
        write(tree, "notes.txt", "the quick red fox jumps over the lazy cat\nsecond line stays\n")
        write(tree, "src/a_very_long_directory_name_for_narrow_screens/another_long_file_name_here.py", "x = 1\n" * 30)
        s.snapshot(
            "Edit src/app.py: a long message that has to wrap on a narrow screen, without making the page wider",
            task="fix-login",
            metadata={"actor": "agent", "tool_name": "Edit", "session_id": "sess-1"},
            conversation=[{"role": "user", "content": "make it greet twice"}, {"role": "assistant", "content": "Done."}],
        )
        write(tree, "src/util.py", "X = 1\n")
        s.snapshot("Write src/util.py", metadata={"actor": "agent", "tool_name": "Write", "session_id": "sess-1"})
        s.restore("latest~2")
        s.undo()
        yield s


@pytest.fixture
def served(store: Store) -> Iterator[Running]:
    with background(store) as running:
        yield running


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    context = playwright.chromium.launch_persistent_context(
        str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS,
        locale="en-US", timezone_id="UTC", viewport={"width": 1280, "height": 800}, bypass_csp=True,
    )
    context.set_default_timeout(20_000)
    try:
        yield context.pages[0] if context.pages else context.new_page()
    finally:
        context.close()
        playwright.stop()


def login(page: Page, running: Running) -> str:
    page.goto(running.url)
    page.wait_for_url(re.compile(r"^http://127\.\d+\.\d+\.\d+:\d+/$"))
    return page.url.rstrip("/")


def pages(store: Store) -> list[str]:
    """Every kind of page (paths under the UI's base URL)."""
    second = store.resolve("latest~1").id
    return [
        "/",
        "/?q=nothing-matches-this",
        "/?path=*.py",
        f"/c/{second}",
        f"/c/{second}?view=split",
        f"/c/{second}?p=notes.txt&ctx=25",
        f"/c/{second}/file?p=src/app.py",
        "/history?path=src/app.py",
        "/compare",
        "/compare?a=%233&b=%231",
        "/?actor=agent",
        "/range?since=1h&actor=agent",
        "/ops",
        "/c/ffffffffffff",
    ]


def restore_preview(page: Page, base: str, store: Store) -> None:
    page.goto(f"{base}/c/{store.resolve('latest~2').id}")
    page.locator("#restore-all").click()
    page.wait_for_selector("#confirm")


def revert_preview(page: Page, base: str, store: Store) -> None:
    page.goto(f"{base}/c/{store.resolve('latest~1').id}")
    page.locator("#revert").click()
    page.wait_for_selector(".confirmbar")


def axe_violations(page: Page) -> list[dict[str, Any]]:
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']})).violations")
    return [{"id": v["id"], "nodes": len(v["nodes"]), "first": v["nodes"][0]["html"][:120]} for v in result]


def axe_on_pages(page: Page, base: str, paths: list[str]) -> dict[str, list[dict[str, Any]]]:
    """axe-core's violations on each page that has some."""
    found = {}
    for path in paths:
        page.goto(base + path)
        page.wait_for_load_state("load")
        if v := axe_violations(page):
            found[path] = v
    return found


@pytest.mark.skipif(not AXE.exists(), reason=f"axe-core is not installed ({AXE}; run 'make axe', which needs npm)")
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_core_finds_no_violation_on_any_page(page: Page, served: Running, store: Store, scheme: str):
    page.emulate_media(color_scheme=scheme)
    base = login(page, served)
    found = axe_on_pages(page, base, pages(store))
    restore_preview(page, base, store)
    if v := axe_violations(page):
        found["restore preview"] = v
    revert_preview(page, base, store)
    if v := axe_violations(page):
        found["revert preview"] = v
    # Issue 42: the timeline's detail pane, and a range's revert with a conflict settled in the page.
    page.goto(base + "/")
    page.locator("#timeline tr.cp td.when, #timeline tr.cp td:nth-child(3)").first.click()
    page.wait_for_selector("#detail p.summary")
    if v := axe_violations(page):
        found["detail pane"] = v
    write(Path(store.root), "src/util.py", "X = 2\n")  # unsaved, on the agent's lines: a conflict
    page.goto(base + "/range?since=1h&actor=agent")
    page.locator("#revert-range").click()
    page.wait_for_selector("fieldset.choice")
    if v := axe_violations(page):
        found["range revert preview with a conflict"] = v
    page.goto(f"{base}/ops")
    page.locator("#undo").click()
    page.wait_for_selector(".confirmbar")
    if v := axe_violations(page):
        found["undo preview"] = v
    page.goto(base + "/")
    page.keyboard.press("?")
    expect(page.locator("dialog#keys-help")).to_be_visible()
    if v := axe_violations(page):
        found["keys help"] = v
    assert found == {}


@pytest.mark.skipif(not AXE.exists(), reason=f"axe-core is not installed ({AXE}; run 'make axe', which needs npm)")
def test_axe_core_finds_no_violation_on_a_phone(page: Page, served: Running, store: Store):
    """390 px: the side-by-side diff scrolls sideways, so it must take the keyboard focus."""
    page.set_viewport_size({"width": 390, "height": 844})
    assert axe_on_pages(page, login(page, served), pages(store)) == {}


def test_dates_keep_to_one_line_on_a_phone(page: Page, served: Running, store: Store):
    page.set_viewport_size({"width": 390, "height": 844})
    base = login(page, served)
    for path in ("/history?path=src/app.py", "/ops", "/"):
        page.goto(base + path)
        page.wait_for_load_state("load")
        heights = page.evaluate(
            "() => Array.from(document.querySelectorAll('main time')).map(t => [t.textContent, t.getBoundingClientRect().height])"
        )
        assert heights, path
        line = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('main time')).lineHeight)")
        assert [h for h in heights if h[1] > 1.5 * line] == [], path


def test_enter_opens_the_selected_row_after_a_click_and_question_mark_lists_the_keys(page: Page, served: Running, store: Store):
    base = login(page, served)
    page.goto(base + "/")
    page.wait_for_selector("#timeline .cp")
    page.locator("main h1, main h2").first.click()  # a click inside the page: the focus goes to <main>
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(rf"/c/{store.resolve('latest~1').id}$"))
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")  # the skip link
    page.keyboard.press("j")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/c/[0-9a-f]+#f-0$"))
    page.keyboard.press("?")
    dialog = page.locator("dialog#keys-help")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("open the selected row")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()


def test_no_page_is_wider_than_a_390_px_phone(page: Page, served: Running, store: Store):
    page.set_viewport_size({"width": 390, "height": 844})
    base = login(page, served)
    widths = {}
    for path in pages(store):
        page.goto(base + path)
        page.wait_for_load_state("load")
        widths[path] = page.evaluate("() => document.documentElement.scrollWidth")
    restore_preview(page, base, store)
    widths["restore preview"] = page.evaluate("() => document.documentElement.scrollWidth")
    revert_preview(page, base, store)
    widths["revert preview"] = page.evaluate("() => document.documentElement.scrollWidth")
    assert {p: w for p, w in widths.items() if w > 390} == {}


def test_the_dark_scheme_follows_the_system(page: Page, served: Running):
    base = login(page, served)
    background_of = "() => getComputedStyle(document.documentElement).backgroundColor"
    page.emulate_media(color_scheme="light")
    page.goto(base + "/")
    assert page.evaluate(background_of) == "rgb(255, 255, 255)"
    page.emulate_media(color_scheme="dark")
    assert page.evaluate(background_of) == "rgb(15, 20, 25)"


def test_the_keyboard_skips_to_the_content_and_walks_the_checkpoints(page: Page, served: Running, store: Store):
    base = login(page, served)
    page.goto(f"{base}/c/{store.resolve('latest~1').id}")
    page.keyboard.press("Tab")
    expect(page.locator("a.skip")).to_be_focused()
    expect(page.locator("a.skip")).to_be_visible()
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.id") == "main"
    page.keyboard.press("[")
    page.wait_for_url(re.compile(rf"/c/{store.resolve('latest~2').id}$"))
    page.keyboard.press("]")
    page.wait_for_url(re.compile(rf"/c/{store.resolve('latest~1').id}$"))
    page.keyboard.press("]")
    page.wait_for_url(re.compile(rf"/c/{store.resolve('latest').id}$"))
    expect(page.locator("h1")).to_contain_text("Checkpoint")
