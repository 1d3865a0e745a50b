"""The issue-27 flows in a real browser (Debian's Chromium through Playwright, as
test_ui_browser.py): a big diff cut with "Show anyway", folding files, the working tree's row and
"you are here", each row's prompt, paging with the keyboard, a preview whose Confirm stays in
view, relative times.  The server runs in this process, so limits are made small here to keep
the inputs small.  Screenshots for docs/ui.md: ``SNAPSTORE_UI_SCREENSHOTS=docs/img
.venv/bin/python -m pytest tests/test_ui_browser_flows.py -k screenshots``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from ui_browser import browser_page, unavailable

REASON = unavailable()
if REASON:
    pytest.skip(REASON, allow_module_level=True)

from playwright.sync_api import Page, expect  # noqa: E402
from test_ui_browser import _demo_history  # noqa: E402

from snapstore.store import Store  # noqa: E402
from snapstore.ui import budget, timeline  # noqa: E402
from snapstore.ui.server import Running, background  # noqa: E402

pytestmark = pytest.mark.browser


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    with browser_page(tmp_path) as opened:
        yield opened


def open_ui(page: Page, running: Running) -> str:
    page.goto(running.url)
    page.wait_for_url(re.compile(r"^http://127\.\d+\.\d+\.\d+:\d+/$"))
    page.wait_for_selector("#timeline .cp")
    return page.url.rstrip("/")


def test_a_cut_diff_shows_anyway_and_files_fold(page: Page, tree: Path, monkeypatch):
    monkeypatch.setattr(budget, "DEFAULT", budget.Limits(page_lines=200, file_lines=40, file_bytes=1 << 20))
    text = "".join(f"line_{i} = {i}\n" for i in range(300))
    (tree / "big.py").write_text(text)
    (tree / "small.py").write_text("a = 1\n")
    with Store.init(tree) as store:
        store.snapshot("one")
        (tree / "big.py").write_text(text.replace("= 1", "= one"))
        (tree / "small.py").write_text("a = 2\n")
        store.snapshot("two")
        with background(store) as running:
            base = open_ui(page, running)
            page.goto(f"{base}/c/{store.resolve('latest').id}")
            big = page.locator("details.filediff", has_text="big.py")
            expect(big.locator("tr.add")).not_to_have_count(0)
            expect(big).to_contain_text("Showing 40 of")
            big.get_by_role("link", name="Show anyway").click()
            page.wait_for_url(re.compile(r"full=1"))
            changed = sum(1 for line in text.splitlines() if "= 1" in line)
            expect(page.locator("details.filediff tr.add")).to_have_count(changed)  # every changed line of big.py
            expect(page.locator("details.filediff")).not_to_contain_text("Showing")
            # fold all, unfold all
            page.goto(f"{base}/c/{store.resolve('latest').id}")
            page.locator("#fold-all").click()
            expect(page.locator("details.filediff[open]")).to_have_count(0)
            expect(page.locator("table.diff").first).to_be_hidden()
            page.locator("#fold-all").click()
            expect(page.locator("details.filediff[open]")).to_have_count(2)


def test_you_are_here_prompts_and_relative_times(page: Page, tree: Path):
    with Store.init(tree) as store:
        _demo_history(store, tree)
        target = store.resolve("latest~2")
        store.restore(target.id)
        with background(store) as running:
            open_ui(page, running)
            row = page.locator("#worktree tr.worktree")
            expect(row).to_contain_text(re.compile(r"Tree = #\d+ .* restored .* nothing unsaved"))
            marked = page.locator("#timeline tr.cp.here")
            expect(marked).to_have_count(1)
            expect(marked).to_have_attribute("data-href", f"/c/{target.id}")
            expect(marked.locator(".here-badge")).to_have_text("you are here")
            prompt = page.locator("#timeline tr.cp", has_text="compare digests").locator(".prompt")
            expect(prompt).to_have_text("The login check leaks timing. Fix it.")
            first_time = page.locator("#timeline tr.cp time").first
            expect(first_time).to_have_text(re.compile(r"now|ago"))
            assert re.search(r"\d{4}", first_time.get_attribute("title") or "")  # the date, in full
            page.goto(f"{page.url.rstrip('/')}/c/{target.id}")
            expect(page.locator("p.here-note")).to_be_visible()  # the checkpoint's page says so too
            page.goto(page.url.split("/c/")[0] + f"/c/{store.resolve('latest').id}")
            page.wait_for_load_state("networkidle")
            expect(page.locator("p.here-note")).to_be_hidden()
            page.goto(page.url.split("/c/")[0] + "/")
            (tree / "notes.txt").write_text("changed after\n")
            page.reload()
            expect(page.locator("#worktree tr.worktree")).to_contain_text(re.compile(r"\+ \d+ paths? unsaved"))
            page.wait_for_selector("#worktree tr[data-here]")  # the real row, not the placeholder
            expect(page.locator("#timeline tr.cp.here")).to_have_count(0)  # the tree equals no checkpoint now


def test_paging_and_keys_walk_the_history(page: Page, tree: Path, monkeypatch):
    monkeypatch.setattr(timeline, "PAGE", 5)
    with Store.init(tree) as store:
        for i in range(12):
            (tree / "f.txt").write_text(f"{i}\n")
            store.snapshot(f"step {i}")
        with background(store) as running:
            open_ui(page, running)
            refs = page.locator("#timeline td.ref")
            expect(refs).to_have_count(5)
            expect(refs.first).to_have_text("#12")
            page.keyboard.press("[")
            page.wait_for_url(re.compile(r"before=8"))
            expect(refs.first).to_have_text("#7")
            page.get_by_role("link", name=re.compile("Older checkpoints")).click()
            expect(refs.first).to_have_text("#2")
            expect(page.get_by_role("link", name=re.compile("Older checkpoints"))).to_have_count(0)
            page.keyboard.press("]")
            expect(refs.first).to_have_text("#12")


def test_the_preview_keeps_confirm_in_view(page: Page, tree: Path):
    for i in range(80):
        (tree / f"file_{i:03d}.txt").write_text(f"old {i}\n")
    with Store.init(tree) as store:
        store.snapshot("old")
        for i in range(80):
            (tree / f"file_{i:03d}.txt").write_text(f"new {i}\n")
        store.snapshot("new")
        with background(store) as running:
            base = open_ui(page, running)
            page.goto(f"{base}/c/{store.resolve('latest~1').id}")
            page.locator("#restore-all").click()
            expect(page.locator(".confirmbar")).to_contain_text("Restoring would overwrite 80 paths.")
            page.locator("ul.plan li").last.scroll_into_view_if_needed()
            expect(page.locator("#confirm")).to_be_in_viewport()
            page.locator("ul.plan li").first.locator("summary").click()
            expect(page.locator("ul.plan li").first.locator("table.diff")).to_contain_text("new 0")
            page.locator("#confirm").click()
            page.wait_for_selector("#result")
            assert (tree / "file_079.txt").read_text() == "old 79\n"


def test_screenshots(page: Page, tmp_path: Path, tree: Path):
    """The pages of docs/ui.md (into $SNAPSTORE_UI_SCREENSHOTS when set)."""
    out = Path(os.environ.get("SNAPSTORE_UI_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    with Store.init(tree) as store:
        _demo_history(store, tree)
        (tree / "src/auth.py").write_text((tree / "src/auth.py").read_text() + "\n# TODO: rate-limit\n")
        with background(store) as running:
            base = open_ui(page, running)
            page.wait_for_selector("#worktree tr[data-here]")
            page.wait_for_selector("#timeline .prompt")
            page.screenshot(path=str(out / "timeline.png"))
            page.emulate_media(color_scheme="dark")
            page.screenshot(path=str(out / "timeline-dark.png"))
            page.emulate_media(color_scheme="light")
            page.goto(f"{base}/c/{store.resolve('latest~2').id}?view=split")
            page.locator("main").screenshot(path=str(out / "diff.png"))
            page.goto(f"{base}/c/{store.resolve('latest~3').id}")
            page.locator("#restore-all").click()
            page.wait_for_selector(".confirmbar")
            page.screenshot(path=str(out / "preview.png"))
            page.set_viewport_size({"width": 390, "height": 844})
            page.goto(base + "/")
            page.wait_for_selector("#timeline .prompt")
            page.screenshot(path=str(out / "timeline-phone.png"))
    for name in ("timeline.png", "timeline-dark.png", "diff.png", "preview.png", "timeline-phone.png"):
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


def test_revert_a_checkpoint_and_find_where_something_was_said(page: Page, tree: Path):
    with Store.init(tree) as store:
        _demo_history(store, tree)
        edited = store.resolve("latest~2")  # "Edit src/auth.py: compare digests in constant time"
        with background(store) as running:
            base = open_ui(page, running)
            page.locator("#filter-q").fill("")
            page.get_by_label("Conversation").fill("leaks timing")
            page.get_by_role("button", name="Filter").click()
            rows = page.locator("#timeline tr.cp")
            expect(rows).to_have_count(1)
            expect(rows.first).to_contain_text("compare digests in constant time")
            page.goto(f"{base}/c/{edited.id}")
            page.locator("#revert").click()
            expect(page.locator(".confirmbar")).to_contain_text("1 path would go back")
            assert "hmac" in (tree / "src/auth.py").read_text()
            page.locator("#confirm").click()
            page.wait_for_selector("#result")
            assert "hmac" not in (tree / "src/auth.py").read_text()  # the agent's edit taken back
            assert "test_bad" in (tree / "tests/test_auth.py").read_text()  # the later one kept
            page.locator("#undo").click()
            page.locator("#confirm").click()
            page.wait_for_selector("#result")
            assert "hmac" in (tree / "src/auth.py").read_text()
