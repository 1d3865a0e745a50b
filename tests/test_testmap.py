"""docs/test-map.md is what the tests import today, and every package has a test file in it."""

from __future__ import annotations

import re

from tests.testmap import DOC, PACKAGES, collect, imported_modules, render, untested


def test_the_checked_in_map_is_current() -> None:
    assert DOC.read_text() == render(collect()), (
        "docs/test-map.md is out of date: run python -m tests.testmap"
    )


def test_every_package_has_a_test_file() -> None:
    by_module = collect()
    assert not untested(by_module), f"no test file imports anything of: {untested(by_module)}"
    # The check can fail: without the ui's modules, ui is reported.
    without_ui = {m: f for m, f in by_module.items() if not m.startswith("snapstore.ui")}
    assert untested(without_ui) == ["ui"]


def test_a_new_import_changes_the_map() -> None:
    by_module = collect()
    grown = {**by_module, "snapstore.tree.paths": ["test_new.py"]}
    assert render(grown) != render(by_module)
    assert "| `snapstore.tree.paths` | test_new |" in render(grown)


def test_imports_are_read_as_modules_inside_functions_too() -> None:
    source = (
        "import snapstore.errors\n"
        "from snapstore.storage import objects, backend\n"
        "from snapstore.store import Store\n"
        "from snapstore.ops.restore import run\n"
        "import os\n"
        "def f():\n"
        "    from snapstore.tree import scan\n"
    )
    assert imported_modules(source) == {
        "snapstore.errors",
        "snapstore.storage.objects",
        "snapstore.storage.backend",
        "snapstore.store",
        "snapstore.ops.restore",
        "snapstore.tree.scan",
    }


def test_the_packages_listed_are_the_packages_there() -> None:
    from tests.testmap import PACKAGE

    found = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert set(PACKAGES) == found


def package_doc_problems(architecture: str, docs: dict[str, str | None]) -> list[str]:
    """Each package's doc exists, is linked from architecture.md and names its layer as LAYERS does."""
    from tests.test_layers import LAYERS

    found = []
    for package in PACKAGES:
        text = docs.get(package)
        if text is None:
            found.append(f"docs/packages/{package}.md is missing")
            continue
        if f"(packages/{package}.md)" not in architecture:
            found.append(f"docs/architecture.md does not link packages/{package}.md")
        layer = re.search(r"\(layer (\d+)", text)
        if layer is None or int(layer.group(1)) != LAYERS[f"snapstore.{package}"]:
            found.append(
                f"docs/packages/{package}.md does not say (layer {LAYERS[f'snapstore.{package}']}"
            )
    return found


def read_package_docs() -> dict[str, str | None]:
    folder = DOC.parent / "packages"
    return {
        package: (folder / f"{package}.md").read_text()
        if (folder / f"{package}.md").is_file()
        else None
        for package in PACKAGES
    }


def test_every_package_has_a_doc_with_its_layer() -> None:
    architecture = (DOC.parent / "architecture.md").read_text()
    docs = read_package_docs()
    assert not package_doc_problems(architecture, docs)
    # The check can fail: a missing doc, and a doc naming the wrong layer.
    assert package_doc_problems(architecture, {**docs, "tree": None}) == [
        "docs/packages/tree.md is missing"
    ]
    wrong = {**docs, "records": (docs["records"] or "").replace("(layer 2", "(layer 3")}
    assert package_doc_problems(architecture, wrong) == [
        "docs/packages/records.md does not say (layer 2"
    ]
