"""Which classes of a file to plan before the one being visited: those it names that come later.

Classes are planned as the traversal meets them, so a Linen class that builds a class of the same
file defined *below* it (T5X's ``MultiHeadDotProductAttention`` building ``DenseGeneral``, directly
or through ``functools.partial(DenseGeneral, ...)``) would not know it as a class of the run: the
site is reported as a foreign submodule and the class stays Linen. Planning reads the original tree
only, so the later classes it names are planned first (their own later dependencies before them),
and their plans are reused when the traversal reaches them.

A later class that names the visited class (its subclass, or a class building it) depends on it and
is not planned early: the visited class keeps today's reading of that name.
"""

from __future__ import annotations

from collections import Counter

import libcst as cst

from linen2nnx.migrate.cst_meta import FastVisitor


def names_read(node: cst.CSTNode) -> set[str]:
    """Every bare name read anywhere in ``node`` (bases, fields, method bodies)."""
    found: set[str] = set()

    class Names(FastVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.add(name.value)

    Names().walk(node)
    return found


def later_classes_first(
    module: cst.Module, node: cst.ClassDef, done: set[cst.ClassDef], memo: dict[cst.ClassDef, set[str]]
) -> list[cst.ClassDef]:
    """The top-level classes after ``node`` that ``node`` names (transitively), dependencies first;
    none of them names ``node`` or a class that does. ``done``: classes already planned; ``memo``: the
    names each class reads, kept for the file (each class is walked once)."""

    def _names_in(cls: cst.ClassDef) -> set[str]:
        if cls not in memo:
            memo[cls] = names_read(cls)
        return memo[cls]

    classes = [s for s in module.body if isinstance(s, cst.ClassDef)]
    if node not in classes:
        return []
    bound = Counter(c.name.value for c in classes)  # a class name bound twice: left as it is
    later = {
        c.name.value: c
        for c in classes[classes.index(node) + 1 :]
        if c not in done and bound[c.name.value] == 1
    }
    uses = {name: _names_in(c) & set(later) for name, c in later.items()}
    order: list[cst.ClassDef] = []
    state: dict[str, str] = {}  # name -> "open" while its dependencies are walked, then "ok" / "no"

    def visit(name: str) -> bool:
        """Plan ``name`` early? Only if every later class it names can be (and none leads back)."""
        if state.get(name) == "open" or name == node.name.value:
            return False
        if name in state:
            return state[name] == "ok"
        state[name] = "open"
        deps_ok = all(visit(dep) for dep in sorted(uses[name] - {name}))
        ok = deps_ok and node.name.value not in _names_in(later[name])
        state[name] = "ok" if ok else "no"
        if ok:
            order.append(later[name])
        return ok

    for name in sorted(_names_in(node) & set(later)):
        visit(name)
    return order
