"""``self.norm = None``, then ``if cfg: self.norm = Norm()``: the None marked as data for NNX.

An NNX module decides on an attribute's first binding whether it is data (a submodule, a Variable) or
static (None, an int, a string); binding a submodule later to an attribute first bound to None raises
"Cannot assign data value ... to static attribute". Linen code often writes the default first and the
layer under a config test, so such a first None becomes ``nnx.data(None)`` -- in a plain, annotated
(``self.norm: nn.Module | None = None``) or unpacking (``self.a, self.b = None, None``) assignment. A
None bound only in the other branch of the test (``else: self.norm = None``) is left as written: no
binding follows it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import libcst as cst

from linen2nnx.migrate.cst_meta import FastVisitor
from linen2nnx.migrate.cst_utils import parse_expression, self_attr
from linen2nnx.migrate.output_values import is_none


def _pairs(small: cst.BaseSmallStatement) -> list[tuple[cst.BaseExpression, cst.BaseExpression | None]]:
    """(target, value) of each name an assignment binds: ``a, b = x, y`` pairs its elements; a value
    unpacked from something other than a display of the same length is None."""
    if isinstance(small, cst.AnnAssign):
        return [(small.target, small.value)]
    if not isinstance(small, cst.Assign):
        return []
    pairs: list[tuple[cst.BaseExpression, cst.BaseExpression | None]] = []
    for target in small.targets:
        inner, value = target.target, small.value
        if isinstance(inner, (cst.Tuple, cst.List)):
            values = (
                [e.value for e in value.elements]
                if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(inner.elements)
                else [None] * len(inner.elements)
            )
            pairs.extend((e.value, v) for e, v in zip(inner.elements, values))
        else:
            pairs.append((inner, value))
    return pairs


class _Bindings(FastVisitor):
    """``self.<attr>`` bindings of a method body in source order: (attr, whether the value is None)."""

    def __init__(self) -> None:
        self.order: list[tuple[str, bool]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        for small in node.body:
            for target, value in _pairs(small):
                attr = self_attr(target)
                if attr is not None:
                    self.order.append((attr, value is not None and is_none(value)))


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
    """The line with each None it binds to one of ``attrs`` written ``nnx.data(None)``; None when it
    binds none."""
    if not attrs or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    marked = {
        id(value)
        for target, value in _pairs(small)
        if value is not None and is_none(value) and self_attr(target) in attrs
    }
    if not marked:
        return None

    class Mark(cst.CSTTransformer):
        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
            if id(original) in marked:
                return cst.Call(parse_expression("nnx.data"), [cst.Arg(updated)])
            return updated

    return stmt.with_changes(body=[small.visit(Mark())])
