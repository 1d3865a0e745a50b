"""Diffs that are right and cheap (issue 42 req 2 and 6): colours lexed from the file's start
(a hunk that starts inside a docstring), highlighted lines cached by content, renames as
renames (a pure rename is not "only the line endings"), function names in hunk headers, more
context on request, image previews from a safe endpoint.  A real LMDB store on disk, the app
through Starlette's TestClient."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed (pip install -e '.[ui]')")
pytest.importorskip("httpx", reason="httpx (for Starlette's TestClient) is not installed")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from ui_client import logged_in  # noqa: E402
from ui_images import png  # noqa: E402

from snapstore.store import Store  # noqa: E402
from snapstore.ui import highlight  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PORT = 47831
TOKEN = "diffs-token-0123456789"


def client_for(store: Store) -> TestClient:
    return logged_in(store, PORT, TOKEN)


def docstring_module(ret: str) -> str:
    """A function whose docstring is 100 lines long, then code: a hunk at its end starts
    (with the old 60-line look-behind) inside the docstring."""
    doc = "".join(f"    line {i} of the docstring, with `backticks`\n" for i in range(100))
    return f'def handler(x):\n    """Summary.\n\n{doc}    """\n    return {ret}\n\n\ndef other():\n    pass\n'


def test_colours_of_a_hunk_that_starts_inside_a_docstring_are_right(tree: Path):
    (tree / "app.py").write_text(docstring_module("compute(x)"))
    with Store.init(tree) as store:
        store.snapshot("one")
        (tree / "app.py").write_text(docstring_module("compute(x) + 1"))
        store.snapshot("two")
        html = client_for(store).get("/c/latest").text
    added = re.search(r'<tr class="add">.*?</tr>', html)
    assert added, html
    # `return` is a keyword, not the inside of a string, and the docstring's line is a string
    assert '<span class="k">return</span>' in added.group(0), added.group(0)
    context = re.findall(r'<tr class="ctx">.*?</tr>', html)
    assert any('<span class="sd">    line 99 of the docstring' in row for row in context), context
    assert 'class="err"' not in html


def test_highlighted_lines_are_cached_by_content_and_the_cache_is_bounded(tree: Path, monkeypatch):
    calls = []
    lex = highlight._lex
    monkeypatch.setattr(highlight, "_lex", lambda *a: calls.append(1) or lex(*a))
    text = "".join(f"def f{i}():\n    return {i}\n" for i in range(50))
    (tree / "a.py").write_text(text)
    (tree / "b.py").write_text("x = 1\n")
    with Store.init(tree) as store:
        store.snapshot("one")
        (tree / "a.py").write_text(text.replace("return 7\n", "return 8\n"))
        store.snapshot("two")
        highlight.CACHE.clear()
        client = client_for(store)
        first = client.get("/c/latest").text
        lexed = len(calls)
        assert lexed == 2  # the old and the new side, once each
        assert client.get("/c/latest").text == first
        assert client.get("/c/latest?view=split").status_code == 200
        assert len(calls) == lexed  # nothing lexed again
    small = highlight._Cache(limit=4000)
    for i in range(20):
        small.put((bytes([i]), "L"), [highlight.Html("x" * 500)], True)
    assert small.size <= 4000 and len(small.entries) < 20
    assert small.get((bytes([19]), "L"), 1) is not None and small.get((bytes([0]), "L"), 1) is None


def test_a_pure_rename_says_so_not_that_line_endings_differ(tree: Path):
    body = "".join(f"row {i}\n" for i in range(30))
    (tree / "db.py").write_text(body)
    with Store.init(tree) as store:
        store.snapshot("one")
        (tree / "db.py").rename(tree / "database.py")
        store.snapshot("rename")
        html = client_for(store).get("/c/latest").text
    assert "line endings" not in html
    assert "the content is unchanged (100% similar)" in html
    assert '<span class="from">db.py</span> → database.py' in html


def test_hunk_headers_name_the_function_and_context_expands(tree: Path):
    body = "".join(f"        step_{k} = {k}\n" for k in range(8))
    text = "import os\n\n\nclass Greeter:\n" + "".join(f"    def m{i}(self):\n{body}        return {i}\n\n" for i in range(20))
    (tree / "g.py").write_text(text)
    with Store.init(tree) as store:
        store.snapshot("one")
        (tree / "g.py").write_text(text.replace("return 12\n", "return 'twelve'\n"))
        store.snapshot("two")
        client = client_for(store)
        html = client.get("/c/latest").text
        header = re.search(r'<tr class="hunk"><td colspan="4">(.*?)</td>', html)
        assert header and header.group(1).endswith("def m12(self):"), header
        ctx_rows = len(re.findall(r'<tr class="ctx">', html))
        more = re.search(r'<a href="([^"]+)" class="expand">', html)
        assert more, "no link to more context"
        wider = client.get(more.group(1).replace("&amp;", "&")).text
        assert len(re.findall(r'<tr class="ctx">', wider)) > ctx_rows + 20


def test_images_are_shown_from_an_endpoint_that_runs_nothing(tree: Path):
    (tree / "plot.png").write_bytes(png(1))
    (tree / "fake.png").write_bytes(b"\x00<html><script>alert(1)</script>")
    with Store.init(tree) as store:
        store.snapshot("one")
        (tree / "plot.png").write_bytes(png(3))
        (tree / "fake.png").write_bytes(b"\x00<html><script>alert(2)</script>")
        cp = store.snapshot("two")
        client = client_for(store)
        html = client.get("/c/latest").text
        srcs = re.findall(r'<img src="([^"]+)" alt="(before|after) \(image/png\)"', html)
        assert [kind for _, kind in srcs] == ["before", "after"], html
        assert all("p=plot.png" in src for src, _ in srcs)
        image = client.get(srcs[1][0].replace("&amp;", "&"))
        assert image.status_code == 200 and image.content == png(3)
        assert image.headers["content-type"] == "image/png"
        assert image.headers["x-content-type-options"] == "nosniff"
        assert image.headers["content-security-policy"] == "default-src 'none'; sandbox"
        refused = client.get(f"/c/{cp.id}/image?p=fake.png")
        assert refused.status_code == 415 and b"script" not in refused.content
        assert client.get(f"/c/{cp.id}/image?p=nothing.png").status_code == 404


def test_a_files_history_follows_its_renames(tree: Path):
    body = "".join(f"row {i}\n" for i in range(30))
    (tree / "db.py").write_text(body)
    with Store.init(tree) as store:
        first = store.snapshot("add db.py")
        (tree / "db.py").write_text(body + "row 30\n")
        second = store.snapshot("grow db.py")
        (tree / "db.py").rename(tree / "database.py")
        third = store.snapshot("rename to database.py", metadata={"actor": "agent"})
        (tree / "database.py").write_text(body)
        fourth = store.snapshot("shrink database.py")
        html = client_for(store).get("/history?path=database.py").text
    rows = re.findall(r'<tr class="cp" data-href="[^"]+">(.*?)</tr>', html)
    ids = [re.search(r'<a href="/c/([0-9a-f]+)">', row).group(1) for row in rows]
    assert ids == [fourth.id, third.id, second.id, first.id]
    assert "renamed from <code>db.py</code>" in rows[1] and "agent" in rows[1]
    assert "p=db.py" in rows[2] and "p=db.py" in rows[3]  # the older versions under their old name


def test_a_mode_change_names_an_executable(tree: Path):
    (tree / "run.sh").write_text("echo hi\n")
    (tree / "run.sh").chmod(0o644)
    with Store.init(tree) as store:
        store.snapshot("one")
        (tree / "run.sh").chmod(0o755)
        store.snapshot("make it executable")
        html = client_for(store).get("/c/latest").text
    assert "Was a file (mode 644); now an executable (mode 755)." in html


def test_a_comparison_loads_its_later_diffs_as_fragments(tree: Path, monkeypatch):
    from snapstore.ui import budget

    monkeypatch.setattr(budget, "DEFAULT", budget.Limits(page_lines=5_000, file_lines=2_000, file_bytes=1 << 20, inline_lines=5))
    for i in range(4):
        (tree / f"n{i}.txt").write_text("".join(f"line {k}\n" for k in range(10)))
    with Store.init(tree) as store:
        store.snapshot("one")
        for i in range(4):
            (tree / f"n{i}.txt").write_text("".join(f"line {k * 2}\n" for k in range(10)))
        store.snapshot("two")
        client = client_for(store)
        for to in ("%232", ""):  # the newest checkpoint (#N: the log's number), then the working tree
            html = client.get(f"/compare?a=%231&b={to}").text
            lazy = [src.replace("&amp;", "&") for src in re.findall(r'<div class="lazy" data-src="([^"]+)"', html)]
            assert len(lazy) == 3 and all(src.startswith("/compare?") and "frag=1" in src for src in lazy)
            pieces = [client.get(src) for src in lazy]
            assert all(p.status_code == 200 and "<html" not in p.text and '<tr class="add">' in p.text for p in pieces)
