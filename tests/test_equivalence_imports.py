"""The modules of ``linen2nnx/equivalence`` import each other without cycles.

``check`` orchestrates (build, comparisons, mesh, training, localisation); everything it uses sits
below it, so no module of the package imports ``check`` except the package ``__init__``. Imports
are read with ``ast``, function-local ones included: a cycle hidden in a function body still ties
the modules together and breaks as soon as someone moves the import to the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "linen2nnx.equivalence"
ROOT = Path(__file__).resolve().parents[1] / "linen2nnx" / "equivalence"


def _targets(node: ast.AST, modules: set[str]) -> set[str]:
    """The package modules one import statement depends on (``__init__`` for package-level names)."""
    out: set[str] = set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.startswith(PACKAGE + "."):
                out.add(alias.name[len(PACKAGE) + 1 :].split(".")[0])
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: ``from .compare import x`` / ``from . import mesh``
            base = PACKAGE + ("." + base if base else "") if node.level == 1 else ""
        if base == PACKAGE:
            for alias in node.names:
                out.add(alias.name if alias.name in modules else "__init__")
        elif base.startswith(PACKAGE + "."):
            out.add(base[len(PACKAGE) + 1 :].split(".")[0])
    return out & (modules | {"__init__"})


def import_graph(root: Path) -> dict[str, set[str]]:
    """``{module: modules it imports}`` for every ``*.py`` of the package folder ``root``."""
    modules = {p.stem for p in root.glob("*.py")}
    graph = {}
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        deps: set[str] = set()
        for node in ast.walk(tree):
            deps |= _targets(node, modules)
        graph[path.stem] = deps - {path.stem}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (or a self-loop), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_equivalence_modules_import_each_other_without_cycles():
    graph = import_graph(ROOT)
    assert {"check", "comparisons", "mesh", "training", "divergence"} <= set(graph)
    assert cycles(graph) == [], f"import cycles in {PACKAGE}: {cycles(graph)}"


def test_only_the_package_init_imports_check():
    graph = import_graph(ROOT)
    importers = sorted(m for m, deps in graph.items() if "check" in deps)
    assert importers == ["__init__"]
    assert {"mesh", "training", "comparisons"} <= graph["check"]  # check orchestrates them


def test_the_graph_sees_function_local_and_package_level_imports(tmp_path):
    """The detector itself: a cycle through a function-local import and one through ``__init__``."""
    pkg = tmp_path / "equivalence"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(f"from {PACKAGE}.a import f\n")
    (pkg / "a.py").write_text(f"def f():\n    from {PACKAGE}.b import g\n    return g()\n")
    (pkg / "b.py").write_text(f"import {PACKAGE}.c\n\ndef g():\n    from {PACKAGE} import a\n")
    (pkg / "c.py").write_text(f"from {PACKAGE} import f\n")
    graph = import_graph(pkg)
    assert graph == {"__init__": {"a"}, "a": {"b"}, "b": {"a", "c"}, "c": {"__init__"}}
    assert cycles(graph) == [["__init__", "a", "b", "c"]]
