"""Orientation on the pages (issue 27 req 2): the working tree's row and the checkpoint it
equals, renames shown as renames, a summary, collapsible files (older/newer links:
test_ui_timeline.py; in the browser: test_ui_browser_flows.py)."""

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

from snapstore.store import Store  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PORT = 47814
ORIGIN = f"http://127.0.0.1:{PORT}"
TOKEN = "here-token-0123456789"
BODY = "".join(f"line {i} of a module that moves\n" for i in range(40))


def client_for(store: Store) -> TestClient:
    return logged_in(store, PORT, TOKEN)


@pytest.fixture
def store(tree: Path) -> Iterator[Store]:
    (tree / "old_name.py").write_text(BODY)
    (tree / "app.py").write_text("a = 1\n")
    with Store.init(tree) as s:
        s.snapshot("first")
        (tree / "old_name.py").rename(tree / "new_name.py")
        (tree / "new_name.py").write_text(BODY.replace("line 7 ", "line seven "))
        (tree / "app.py").write_text("a = 2\n")
        s.snapshot("rename and edit")
        yield s


def here_of(client: TestClient) -> tuple[str, str]:
    """The working tree's row: its text and the id it names (empty: none)."""
    html = client.get("/here.frag").text
    found = re.search(r'data-here="([0-9a-f]*)"', html)
    assert found, html
    return re.sub(r"<[^>]+>", "", html), found.group(1)


def test_a_rename_shows_as_one_renamed_file_with_its_diff(store: Store):
    html = client_for(store).get("/c/latest").text
    assert "renamed (" in html and '<span class="from">old_name.py</span> → new_name.py' in html
    assert "st-A" not in html and "st-D" not in html  # not an added plus a deleted file
    assert "-line 7 of a module" in re.sub(r"<[^>]+>", "", html).replace("\n", "")


def test_the_summary_and_collapsible_files(store: Store):
    html = client_for(store).get("/c/latest").text
    assert re.search(r'<p class="summary">2 files changed: 1 modified, 1 renamed; <span class="add">\+2</span> <span class="del">−2</span> lines</p>', html)
    assert html.count('<details class="filediff"') == 2 and '<details class="filediff" id="f-0" open>' in html
    assert 'id="fold-all"' in html


def test_the_working_tree_row_names_the_checkpoint_the_tree_equals(store: Store, tree: Path):
    client = client_for(store)
    assert 'id="worktree" data-src="/here.frag"' in client.get("/").text
    latest, first = store.resolve("latest").id, store.resolve("latest~1").id
    text, here = here_of(client)
    assert "Tree = #2 rename and edit · the newest checkpoint, nothing unsaved" in text and here == latest
    (tree / "app.py").write_text("a = 3\n")
    (tree / "scratch.txt").write_text("new\n")
    text, here = here_of(client)
    assert "Tree = #2 rename and edit + 2 paths unsaved" in text and "+1 ~1 -0" in text and here == ""
    store.restore(first)
    text, here = here_of(client)
    # Issue 42 req 3: after a restore the tree is a checkpoint, not unsaved work.
    assert re.search(r"Tree = #1 first · restored .* · nothing unsaved · 3 paths differ from the newest, #2", text), text
    assert "unsaved" not in text.replace("nothing unsaved", "") and here == first
    html = client.get("/here.frag").text
    assert 'href="#r1"' in html and 'data-page="/?before=2#r1"' in html  # linked to its row
    assert 'id="r1"' in client.get("/").text
    (tree / "app.py").write_text("a = 4\n")
    text, here = here_of(client)
    assert "Tree = #1 first + 1 path unsaved" in text and here == ""  # based on what was restored
    store.undo()
    _, here = here_of(client)
    assert here == store.operations()[0].target  # the tree as it was before the restore


def test_a_selective_restore_names_no_checkpoint(store: Store, tree: Path):
    client = client_for(store)
    store.restore(store.resolve("latest~1").id, ["app.py"])
    _, here = here_of(client)
    assert here == ""


def test_the_row_is_only_on_the_unfiltered_first_page(store: Store):
    client = client_for(store)
    assert 'id="worktree"' not in client.get("/?q=first").text
    assert 'id="worktree"' not in client.get("/?before=2").text


def test_changed_words_are_marked_inside_a_changed_line(tree: Path):
    (tree / "m.py").write_text("from operator import itemgetter  # a < b\nx = 1\n")
    with Store.init(tree) as s:
        s.snapshot("one")
        (tree / "m.py").write_text("from operator import attrgetter  # a < b\nsomething = entirely_else()\n")
        s.snapshot("two")
        client = client_for(s)
        for view in ("unified", "split"):
            html = client.get(f"/c/latest?view={view}").text
            assert html.count("<del>") == 1 and html.count("<ins>") == 1, view
            assert '<span class="n"><del>itemgetter</del></span>' in html
            assert '<span class="n"><ins>attrgetter</ins></span>' in html


def test_word_marks_survive_escaping_and_span_boundaries():
    from snapstore.ui import words
    from snapstore.ui.html import Html

    old, new = "a <b> & c", "a <x> & c"
    found = words.changed(old, new)
    assert found == ([(3, 4)], [(3, 4)])
    assert words.mark(Html("a &lt;b&gt; &amp; c"), found[0], "del") == "a &lt;<del>b</del>&gt; &amp; c"
    spanned = words.mark(Html('<span class="k">ab</span><span class="n">cd</span>'), [(1, 3)], "ins")
    assert spanned == '<span class="k">a<ins>b</ins></span><span class="n"><ins>c</ins>d</span>'
    assert words.changed("x = 1", "completely different text") is None


def test_compare_uses_the_timeline_s_numbers(store: Store):
    """Issue 42 req 3: one numbering: #N in Compare is the timeline's #N (the log number, which
    never changes), in its suggestions and in what it resolves."""
    client = client_for(store)
    first = store.resolve(":/first")
    store.snapshot("third")  # #2 still names "rename and edit", in the browser and in the CLI
    timeline = client.get("/").text
    assert re.search(r'<span title="checkpoint number 1[^"]*">#1</span>.*?first', timeline, re.S)
    page = client.get("/compare?a=%231&b=%232").text
    assert f'<a href="/c/{first.id}">{first.short_id}</a> first' in page
    assert '<option value="#1">first</option>' in page and '<option value="#3">third</option>' in page
    assert "#9: no checkpoint has that number" in client.get("/compare?a=%239").text
    assert [store.resolve(f"#{n}").message for n in (1, 3)] == ["first", "third"]  # the CLI's #N


def test_numbers_skipped_by_hidden_safety_checkpoints_are_explained(store: Store, tree: Path):
    client = client_for(store)
    store.restore(store.resolve(":/first").id)  # records #3, a safety checkpoint
    (tree / "app.py").write_text("a = 5\n")
    store.snapshot("after the restore")  # #4
    html = client.get("/").text
    row = re.search(r'<tr class="cp[^"]*" id="r2".*?</tr>', html, re.S)
    assert row and "+1 hidden" in row.group(0) and "1 safety checkpoint (the tree before a restore" in row.group(0)
    assert "+1 hidden" not in client.get("/?safety=1").text  # listed, nothing to explain
