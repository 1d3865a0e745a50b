"""No class name is defined twice in the package (issue 39, review 1.7), except today's few.

Two classes of one name (a revert ``Request`` and a service ``Request``; a manifest ``Entry`` and
a pack ``Entry``) make a reader check the import every time.  Renaming them touches many files, so
they are listed here instead, and the list only shrinks: a new duplicate fails, and so does a
listed name that is no longer defined twice (remove it from the list when you rename one).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "snapstore"

#: Class names defined in more than one place today, with where (for the reader: a module moved
#: does not fail the check, a third definition does).  Rename one of each and drop its line.
ALLOWED: dict[str, tuple[str, ...]] = {}


def class_places(sources: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Class name -> the ``module:line`` of each definition (nested classes included)."""
    places: dict[str, list[str]] = {}
    for module, text in sources:
        for node in ast.walk(ast.parse(text, module)):
            if isinstance(node, ast.ClassDef):
                places.setdefault(node.name, []).append(f"{module}:{node.lineno}")
    return places


def complaints(places: dict[str, list[str]], allowed: dict[str, tuple[str, ...]]) -> list[str]:
    """What breaks the rule: new duplicates, more definitions than listed, listed names gone."""
    found = []
    for name, where in sorted(places.items()):
        if len(where) < 2:
            continue
        if name not in allowed:
            found.append(f"class {name} is defined {len(where)} times: {', '.join(where)}")
        elif len(where) > len(allowed[name]):
            found.append(f"class {name} gained a definition: {', '.join(where)}")
    for name in sorted(allowed):
        if len(places.get(name, [])) < 2:
            found.append(f"class {name} is no longer defined twice: drop it from ALLOWED")
    return found


def package_sources() -> list[tuple[str, str]]:
    return [
        (str(path.relative_to(PACKAGE)), path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))
    ]


def test_no_class_name_is_defined_twice_beyond_the_list() -> None:
    problems = complaints(class_places(package_sources()), ALLOWED)
    assert not problems, "\n".join(problems)


def test_the_check_sees_a_new_duplicate_and_a_name_gone() -> None:
    base = class_places(package_sources())  # (parsed once: the planted modules are added to it)

    def plus(*extra: tuple[str, str]) -> dict[str, list[str]]:
        out = {name: list(where) for name, where in base.items()}
        for name, where in class_places(extra).items():
            out.setdefault(name, []).extend(where)
        return out

    # A new module defining a Store of its own is a new duplicate.
    planted = plus(("ops/extra.py", "class Store:\n    pass\n"))
    assert any("class Store is defined 2 times" in p for p in complaints(planted, ALLOWED))
    # A third definition of a listed name is caught; a listed name defined once must go.
    listed = {"Request": ("ops/extra.py", "records/requests.py")}
    third = plus(("ops/extra.py", "class Request:\n    pass\n"), ("ops/more.py", "class Request:\n    pass\n"))
    assert any("class Request gained" in p for p in complaints(third, listed))
    assert complaints(base, listed) == ["class Request is no longer defined twice: drop it from ALLOWED"]
