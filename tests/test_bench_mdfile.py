"""The benchmark pages keep what people wrote: a run rewrites only its generated part."""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks.mdfile import BEGIN, END, splice, write_generated

ROOT = Path(__file__).resolve().parent.parent


def _page(generated: str, before: str = "", after: str = "") -> str:
    return before + BEGIN.format(tool="t") + "\n" + generated + "\n" + END + "\n" + after


def test_a_run_replaces_only_the_generated_part(tmp_path: Path) -> None:
    before = "intro written by hand\n\n"
    after = "\n## A profile\n\nwritten by hand, with a table:\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n"
    page = tmp_path / "p.md"
    page.write_text(_page("| old | table |\n", before, after))
    assert write_generated(str(page), "# New\n\n| new | table |\n", "t") == str(page)
    text = page.read_text()
    assert text.startswith(before) and text.endswith(after)
    assert "| new | table |" in text and "| old | table |" not in text
    # A second run over its own output changes nothing but the generated text.
    write_generated(str(page), "# New\n\n| new | table |\n", "t")
    assert page.read_text() == text


def test_a_page_without_markers_is_never_overwritten(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# all of this was written by hand\n")
    written = write_generated(str(page), "generated\n", "t")
    assert written == str(page) + ".new"
    assert page.read_text() == "# all of this was written by hand\n"
    assert "generated" in Path(written).read_text()


def test_an_unclosed_marker_counts_as_no_marker(tmp_path: Path) -> None:
    page = BEGIN.format(tool="t") + "\nhalf a page, the end marker lost\nhand-written\n"
    assert splice(page, "x\n", "t") is None


def test_a_new_page_gets_markers(tmp_path: Path) -> None:
    page = tmp_path / "new.md"
    write_generated(str(page), "| a |\n", "t")
    assert splice(page.read_text(), "| b |\n", "t") is not None
    assert not list(tmp_path.glob("*.tmp*"))


def test_every_page_make_bench_writes_has_its_markers() -> None:
    makefile = (ROOT / "Makefile").read_text()
    pages = re.findall(r"--(?:md|out) (docs/\S+\.md)", makefile)
    assert len(pages) >= 5, pages
    for rel in pages:
        text = (ROOT / rel).read_text()
        assert splice(text, "x\n", "t") is not None, f"{rel} has no generated-part markers"
