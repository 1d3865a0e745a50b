"""The import direction of the package (docs/architecture.md, "Which way imports run").

A module may import its own layer and the layers below it, never a layer above: storage knows
nothing of records, records nothing of the tree, the stages in ``ops`` nothing of the Store
facade, and nothing in the library knows the CLI.  Imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "snapstore"

LAYERS = {
    "snapstore.__version__": 0,
    "snapstore.errors": 0,
    "snapstore.units": 0,
    "snapstore.platform": 0,  # the one place that names a Linux-only facility (docs/platforms.md)
    "snapstore.storage": 1,
    "snapstore.records": 2,
    "snapstore.tree": 3,
    "snapstore.ops": 4,
    "snapstore.remote": 4,  # push/fetch/clone stages beside ops (docs/remote.md)
    "snapstore.store": 5,
    "snapstore.facade": 5,
    "snapstore.hooks": 5,
    "snapstore.policy": 5,
    "snapstore.render": 6,
    "snapstore.testing": 6,
    "snapstore.cli": 7,
    "snapstore.__main__": 9,  # the entry point, like the console script (service.client)
    "snapstore.service": 6,  # protocol and daemon: the client side, below the CLI
    "snapstore.service.server": 8,  # runs the CLI's commands
    "snapstore.service.client": 8,  # falls back to the CLI
    "snapstore.integrations": 6,  # agent glue (hooks, MCP, settings): uses the Store, not the CLI
    "snapstore.ui": 6,  # the web UI: uses the Store and render, not the CLI
}


def layer_of(module: str) -> int:
    best = None
    for prefix, layer in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, layer)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS and docs/architecture.md")
    return best[1]


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("snapstore")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("snapstore"):
                continue
            # ``from package import module`` imports that module (not the package's own code).
            for a in node.names:
                sub = f"{target}.{a.name}"
                found.append((node.lineno, sub if _is_module(sub) or target in _NAMED else target))
    return found


#: Packages whose imported names are layered by their own names (``snapstore.__version__``).
_NAMED = ("snapstore", "snapstore.storage", "snapstore.records", "snapstore.tree", "snapstore.ops")


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_a_higher_layer(path: Path):
    module = module_name(path)
    own = layer_of(module)
    tree = ast.parse(path.read_text(), str(path))
    bad = [
        f"line {line}: {target} (layer {layer_of(target)})"
        for line, target in imported(tree, module, path.name == "__init__.py")
        if layer_of(target) > own
    ]
    assert not bad, f"{module} (layer {own}) imports a higher layer: " + "; ".join(bad)


def test_every_module_is_in_a_layer():
    for path in MODULES:
        layer_of(module_name(path))


def test_the_check_sees_a_violation(tmp_path: Path):
    # The checker itself must be able to fail: a storage module importing the Store is caught.
    source = "def f():\n    from snapstore.store import Store\n    return Store\n"
    targets = imported(ast.parse(source), "snapstore.storage.objects", False)
    assert [t for _, t in targets if layer_of(t) > layer_of("snapstore.storage.objects")]


def import_graph() -> dict[str, set[str]]:
    """Each module's imports of other modules of the package (a package's own submodule, as
    ``from snapstore.ops.snapshot import walk``, counts as that submodule)."""
    graph: dict[str, set[str]] = {}
    for path in MODULES:
        module = module_name(path)
        targets = imported(ast.parse(path.read_text(), str(path)), module, path.name == "__init__.py")
        graph[module] = {t for _, t in targets if t != module and _is_module(t)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import loops of ``graph``: each strongly connected group of two or more modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm (the graph is ~100 modules: recursion is fine)
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    # Type-only and function-local imports count: a loop of any kind means neither module can
    # be read, tested or moved without the other.
    assert cycles(import_graph()) == []


def test_the_cycle_check_sees_a_loop():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def package_of(module: str) -> str:
    """The layered unit a module belongs to: the longest prefix of it in LAYERS (a package, a
    part of one with a layer of its own such as ``service.server``, or a top-level module)."""
    return max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        own = package_of(module)
        graph.setdefault(own, set()).update(package_of(t) for t in targets if package_of(t) != own)
    return graph


def test_no_package_import_cycles():
    # The review's "three arrows up" (cli -> integrations -> service -> cli): a loop between
    # packages means no package of it can be read or tested without the others.
    assert cycles(package_graph()) == []


def test_the_package_check_sees_a_loop():
    assert package_of("snapstore.ops.snapshot.walk") == "snapstore.ops"
    assert package_of("snapstore.service.server.http_endpoint") == "snapstore.service.server"
    graph = package_graph()
    graph["snapstore.storage"] = graph.get("snapstore.storage", set()) | {"snapstore.cli"}
    assert cycles(graph)


def test_every_layered_unit_is_a_package_or_a_top_level_module():
    # A unit with a layer of its own inside a package (service's client and server) is a
    # directory of its own: otherwise one package mixes two layers, and the package loop the
    # unit check cannot see is back (cli -> integrations -> service -> cli).
    for unit in LAYERS:
        if unit == "snapstore.__version__":
            continue
        path = PACKAGE.parent.joinpath(*unit.split("."))
        top_level = unit.count(".") == 1 and path.with_suffix(".py").is_file()
        assert top_level or (path / "__init__.py").is_file(), unit
