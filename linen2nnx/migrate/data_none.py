"""``self.norm = None``, then ``if cfg: self.norm = Norm()``: the None marked as data for NNX.

An NNX module decides on an attribute's first binding whether it is data (a submodule, a Variable) or
static (None, an int, a string); binding a submodule later to an attribute first bound to None raises
"Cannot assign data value ... to static attribute". Linen code often writes the default first and the
layer under a config test, so such a first None becomes ``nnx.data(None)``. A None bound only in the
other branch of the test (``else: self.norm = None``) is left as written: no binding follows it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import libcst as cst

from linen2nnx.migrate.cst_meta import FastVisitor
from linen2nnx.migrate.cst_utils import parse_expression, self_attr
from linen2nnx.migrate.output_values import is_none


class _Bindings(FastVisitor):
    """``self.<attr>`` bindings of a method body in source order: (attr, whether the value is None)."""

    def __init__(self) -> None:
        self.order: list[tuple[str, bool]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            attr = self_attr(target.target)
            if attr is not None:
                self.order.append((attr, is_none(node.value)))


def none_then_rebound(body: Iterable[cst.BaseStatement], submodules: Collection[str]) -> set[str]:
    """The attributes among ``submodules`` that ``body`` binds to None before binding them again."""
    bindings = _Bindings()
    for stmt in body:
        bindings.walk(stmt)
    found: set[str] = set()
    pending: set[str] = set()
    for attr, none in bindings.order:
        if attr in pending:
            found.add(attr)
        if none and attr in submodules:
            pending.add(attr)
    return found


def as_data(stmt: cst.SimpleStatementLine, attrs: Collection[str]) -> cst.SimpleStatementLine | None:
    """``self.<attr> = nnx.data(None)`` for a ``self.<attr> = None`` line of one of ``attrs``; else None."""
    if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
        return None
    assign = stmt.body[0]
    if not is_none(assign.value) or not any(self_attr(t.target) in attrs for t in assign.targets):
        return None
    value = cst.Call(parse_expression("nnx.data"), [cst.Arg(assign.value)])
    return stmt.with_changes(body=[assign.with_changes(value=value)])
