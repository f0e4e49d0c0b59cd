"""``traverse.transform`` is libcst's ``tree.visit(transformer)``: the same calls to the transformer in
the same order, the same tree back (also when statements are removed, flattened or emptied), new
nodes where libcst makes new nodes; and its per-type plan is libcst's own visit order."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import libcst as cst
import pytest

from linen2nnx.migrate.cst_meta import syntax_fields
from linen2nnx.migrate.module_rewrite import _KEPT_TYPES
from linen2nnx.migrate.traverse import BODY, OPTIONAL, REQUIRED, SENTINEL, field_plan, transform

ROOT = Path(__file__).resolve().parents[1]
FILES = [
    *sorted((ROOT / "tests" / "fixtures" / "migrate").glob("*/*_in.py"))[::7],
    ROOT / "linen2nnx" / "migrate" / "traverse.py",
    ROOT / "linen2nnx" / "migrate" / "planning.py",
]


class Recording(cst.CSTTransformer):
    """Logs every call it gets for a non-kept node, and rewrites: calls of ``print`` lose their
    arguments, ``pass`` statements go, a ``return`` gets a comment line before it, ``del`` loses its
    only small statement (emptied lines are dropped), ``x.y`` becomes ``x.z``."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, int, int]] = []
        self.ids: dict[int, int] = {}  # id -> first-seen order, so that logs of two trees compare

    def _key(self, node: cst.CSTNode) -> int:
        return self.ids.setdefault(id(node), len(self.ids))

    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in _KEPT_TYPES:
            return False
        self.log.append(("visit", self._key(node), 0))
        return not isinstance(node, cst.Lambda)

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> object:
        if type(original) in _KEPT_TYPES:
            return updated
        self.log.append(("leave", self._key(original), int(updated is original)))
        if (
            isinstance(updated, cst.Call)
            and isinstance(updated.func, cst.Name)
            and updated.func.value == "print"
        ):
            return updated.with_changes(args=())
        if (
            isinstance(updated, cst.SimpleStatementLine)
            and updated.body
            and isinstance(updated.body[0], cst.Pass)
        ):
            return cst.RemoveFromParent()
        if (
            isinstance(updated, cst.SimpleStatementLine)
            and updated.body
            and isinstance(updated.body[0], cst.Return)
        ):
            return cst.FlattenSentinel([cst.parse_statement("# returns\nx = 1\n"), updated])
        if isinstance(updated, cst.Del):
            return cst.RemoveFromParent()
        if isinstance(updated, cst.Attribute) and updated.attr.value == "y":
            return updated.with_changes(attr=cst.Name("z"))
        return updated

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        return None

    def on_leave_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        return None


SNIPPET = """
def f(x):
    pass
    print(x.y, 1)
    del x
    if x:
        pass
    g = lambda q: q.y
    return x.y
"""


@pytest.mark.parametrize("source", [SNIPPET, *(f.read_text() for f in FILES)])
def test_same_calls_same_tree(source: str) -> None:
    libcst_side, ours = Recording(), Recording()
    expected = cst.parse_module(source).visit(libcst_side)
    tree = cst.parse_module(source)
    got = transform(tree, ours, _KEPT_TYPES)
    assert got.code == expected.code
    assert got.deep_equals(expected)
    assert ours.log == libcst_side.log
    if "print(x.y" in source:
        assert "print()" in got.code and "del x" not in got.code and "# returns" in got.code
    # every node the traversal entered is new in the output, as with libcst
    entered = {id(n) for n in _nodes(tree) if type(n) not in _KEPT_TYPES and not isinstance(n, cst.Lambda)}
    assert not entered & {id(n) for n in _nodes(got)}


def _nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []

    class All(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            found.append(n)
            return not isinstance(n, cst.Lambda)

    node.visit(All())
    return found


def _libcst_plan(kind: type) -> list[tuple[str, str]]:
    """(field, visit_<how>) as libcst's ``_visit_and_replace_children`` of ``kind`` visits them."""
    source = inspect.getsource(kind._visit_and_replace_children)
    found = re.findall(
        r'visit_(required|optional|sentinel|sequence|body_sequence)\(\s*self,\s*"(\w+)"', source
    )
    return [(field, how) for how, field in found]


NODE_TYPES = [
    t
    for t in vars(cst).values()
    if isinstance(t, type) and issubclass(t, cst.CSTNode) and "_visit_and_replace_children" in vars(t)
]


@pytest.mark.parametrize("kind", NODE_TYPES, ids=[t.__name__ for t in NODE_TYPES])
def test_plan_is_libcsts(kind: type) -> None:
    """The fields visited, in libcst's order, with what a removed child becomes."""
    libcst_plan = _libcst_plan(kind)
    plan = dict(field_plan(kind))
    visited = list(dict.fromkeys(field for field, _ in libcst_plan if field in plan))
    assert visited == [field for field, _ in field_plan(kind) if field in dict(libcst_plan)]
    hows = {"required": REQUIRED, "optional": OPTIONAL, "sentinel": SENTINEL, "body_sequence": BODY}
    for field, how in libcst_plan:
        if field in plan and how in hows:
            assert plan[field] == hows[how], field


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_lexical_fields_hold_kept_nodes(path: Path) -> None:
    """What the traversal copies without visiting is of the kept types, as libcst would leave it."""
    for node in _nodes(cst.parse_module(path.read_text())):
        for field in (f for f in node.__dataclass_fields__ if f not in syntax_fields(type(node))):
            value = getattr(node, field)
            for child in value if isinstance(value, (tuple, list)) else [value]:
                if isinstance(child, cst.CSTNode):
                    assert type(child) in _KEPT_TYPES, (type(node).__name__, field)
