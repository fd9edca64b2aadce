"""The package's import graph: no circle between two of its modules (docs/design.md §8).

The import-linter contracts keep the layers between folders; a circle inside a folder
(two modules each importing the other, one of them lazily inside a function) is what they
do not see, so this test reads every ``import`` statement, at any depth, and looks for one.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_perfgate"


def modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = list(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules ``name`` imports anywhere in its file, its own parent package
    included (a package whose ``__init__`` imports a module that imports the package back
    is a circle too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    deps: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] \
                if node.level else []
            mod = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{mod}.{alias.name}"
                deps.add(full if full in known else mod)
        elif isinstance(node, ast.Import):
            deps.update(alias.name for alias in node.names)
    return {d for d in deps if d in known and d != name}


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_circles_are_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [frozenset({"a", "b", "c"})]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_a_lazy_import_is_an_edge(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from pkg.other import x\n")
    assert imports("pkg.m", f, {"pkg.m": f, "pkg.other": f}) == {"pkg.other"}


def test_a_package_and_its_module_can_be_a_circle(tmp_path: Path) -> None:
    init, out = tmp_path / "__init__.py", tmp_path / "out.py"
    init.write_text("def main():\n    from pkg.out import Reply\n")
    out.write_text("def emit():\n    from pkg import version\n")
    known = {"pkg": init, "pkg.out": out}
    graph = {name: imports(name, path, known) for name, path in known.items()}
    assert graph == {"pkg": {"pkg.out"}, "pkg.out": {"pkg"}}
    assert circles(graph) == [frozenset(known)]


def test_no_import_circle_in_the_package() -> None:
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    found = [sorted(c) for c in circles(graph)]
    assert found == [], "modules that import each other (move the shared name down)"
