"""Restore and undo previews (issue 27 req 3): counts and warnings first, Confirm in a bar that
stays in view, unsaved paths first, each path's diff from the tree to what would be written;
the result points at Undo; the operations page says what each operation did.  (The sticky bar
in a real browser: test_ui_browser_flows.py.)"""

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

from ui_client import logged_in, post_form  # noqa: E402

from snapstore.store import Store  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PORT = 47815
ORIGIN = f"http://127.0.0.1:{PORT}"
TOKEN = "preview-token-0123456789"


def client_for(store: Store) -> TestClient:
    return logged_in(store, PORT, TOKEN)


def post(client: TestClient, path: str, data: dict | None = None):
    return post_form(client, PORT, path, data)


def text(html: str) -> str:
    import html as h

    return h.unescape(re.sub(r"<[^>]+>", "", html))


@pytest.fixture
def store(tree: Path) -> Iterator[Store]:
    for i in range(30):
        (tree / f"f{i:02d}.txt").write_text(f"old {i}\n")
    with Store.init(tree) as s:
        s.snapshot("thirty files")
        for i in range(30):
            (tree / f"f{i:02d}.txt").write_text(f"new {i}\n")
        (tree / "added.txt").write_text("added\n")
        s.snapshot("all changed")
        (tree / "f29.txt").write_text("unsaved work\n")  # in no checkpoint
        yield s


def test_the_restore_preview_puts_counts_warning_and_confirm_before_the_list(store: Store):
    client = client_for(store)
    html = post(client, f"/c/{store.resolve('latest~1').id}/restore/preview").text
    bar, rest = html.split('<div class="confirmbar"', 1)[1].split("</div>", 1)
    assert "Restoring would overwrite 30 and delete 1 paths." in text(bar)
    assert "1 path holds work that no checkpoint has yet." in text(bar)
    assert 'id="confirm"' in bar and "Restore 31 paths now" in text(bar)
    assert 'class="plan"' in rest and 'id="confirm"' not in rest
    listed = re.findall(r"would \w+</span> <code>([^<]+)</code>", rest)
    assert listed[0] == "f29.txt" and len(listed) == 31  # the unsaved path first
    # each path opens on its diff from the tree now (-) to what the restore would write (+)
    # (rendered only when opened: the page carries the address of each diff, not the diff)
    first = rest.split("<li>")[1]
    src = re.search(r'<details data-src="([^"]+)">', first)
    assert src and "-unsaved work" not in text(first)
    diff = client.get(src.group(1).replace("&amp;", "&")).text
    assert "<html" not in diff and "-unsaved work" in text(diff).replace("\n", "") and "+old 29" in text(diff).replace("\n", "")
    assert len(html) < 40_000, len(html)  # 31 paths listed, no diff rendered


def test_operations_label_a_revert_as_a_revert(store: Store, tree: Path):
    (tree / "f03.txt").write_text("changed by the agent\n")
    store.snapshot("agent edit")
    store.revert("latest")
    plain = text(client_for(store).get("/ops").text)
    assert "Revert of 2 paths: f03.txt, f29.txt" in plain, plain
    assert "Restore of" not in plain


def test_the_undo_preview_and_the_result_lead_with_what_matters(store: Store, tree: Path):
    client = client_for(store)
    first = store.resolve("latest~1").id
    preview = post(client, f"/c/{first}/restore/preview").text
    plan = re.search(r'name="plan" value="([0-9a-f]+)"', preview).group(1)
    done = post(client, f"/c/{first}/restore", {"plan": plan, "confirm": "yes"}).text
    assert "Restored: 31 paths" in text(done)
    assert done.index('id="undo"') < done.index('class="plan"')  # Undo before the long list
    assert "snapstore undo" not in done
    undo = post(client, "/undo/preview").text
    bar = undo.split('<div class="confirmbar"', 1)[1].split("</div>", 1)[0]
    assert "Undoing would" in text(bar) and 'id="confirm"' in bar


def test_the_operations_page_says_what_each_operation_did(store: Store):
    store.restore("latest~1")
    store.undo()
    html = client_for(store).get("/ops").text
    plain = text(html)
    assert "Restore of the whole tree" in plain and "Undo of the operation before" in plain
    assert "thirty files" in plain  # the restore's target, by its message
    assert html.count('id="undo"') == 1
    assert html.index('id="undo"') < html.index("op 1")  # on the newest row, op 2
