"""``self.norm = None``, then ``if cfg: self.norm = Norm()``: the attribute marked as data for NNX.

An NNX module decides on an attribute's first binding whether it is data (a submodule, a Variable) or
static (None, a function, an int); binding a submodule later to an attribute first bound to a static
value raises "Cannot assign data value ... to static attribute". Linen code often writes the default
first and the layer under a config test. A first None becomes ``nnx.data(None)`` -- in a plain,
annotated (``self.norm: nn.Module | None = None``) or unpacking (``self.a, self.b = None, None``)
assignment. A first function (``self.summary = identity``, Hugging Face's sequence summary) must stay
static when no layer replaces it (``nnx.jit`` refuses a function as data), so there the later
submodule is written ``nnx.data(nnx.Linear(...))`` instead. A value bound only in the other branch of
the test (``else: self.norm = None``) is left as written: no binding follows it.
"""

from __future__ import annotations

import dataclasses
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
    """``self.<attr>`` bindings of a method body in source order: (attr, what the value is: ``none``,
    ``static`` -- a name, attribute, lambda or literal, evaluated to no new module -- or ``other``)."""

    def __init__(self) -> None:
        self.order: list[tuple[str, str]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        for small in node.body:
            for target, value in _pairs(small):
                attr = self_attr(target)
                if attr is not None:
                    self.order.append((attr, _kind(value)))


def _kind(value: cst.BaseExpression | None) -> str:
    if value is not None and is_none(value):
        return "none"
    return "static" if isinstance(value, _STATIC) else "other"


_STATIC = (cst.Name, cst.Attribute, cst.Lambda, cst.SimpleString, cst.Integer, cst.Float)


@dataclasses.dataclass(frozen=True)
class DataMarks:
    """What ``__init__`` marks as data: attributes whose first None is ``nnx.data(None)``, and those
    whose later submodules are ``nnx.data(...)`` (a first static value other than None)."""

    none_first: frozenset[str] = frozenset()
    static_first: frozenset[str] = frozenset()


def data_marks(body: Iterable[cst.BaseStatement], submodules: Collection[str]) -> DataMarks:
    """The marks for a setup ``body`` whose ``submodules`` are attributes that hold a submodule."""
    bindings = _Bindings()
    for stmt in body:
        bindings.walk(stmt)
    pending: dict[str, str] = {}  # attribute -> the static kind a later binding would follow
    none_first: set[str] = set()
    static_first: set[str] = set()
    for attr, kind in bindings.order:
        if pending.get(attr) == "none":
            none_first.add(attr)
        elif pending.get(attr) == "static":
            static_first.add(attr)
        if kind != "other" and attr in submodules:
            pending[attr] = kind
    return DataMarks(frozenset(none_first), frozenset(static_first))


def as_data(stmt: cst.SimpleStatementLine, marks: DataMarks) -> cst.SimpleStatementLine | None:
    """The line with each None it binds to a ``none_first`` attribute, and each call it binds to a
    ``static_first`` one, written ``nnx.data(...)``; None when it binds neither."""
    if not (marks.none_first or marks.static_first) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    marked = {
        id(value)
        for target, value in _pairs(small)
        if value is not None
        and (
            (is_none(value) and self_attr(target) in marks.none_first)
            or (isinstance(value, cst.Call) and self_attr(target) in marks.static_first)
        )
    }
    if not marked:
        return None

    class Mark(cst.CSTTransformer):
        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
            return _wrapped(original, updated)

        def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
            return _wrapped(original, updated)

    def _wrapped(original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
        if id(original) in marked:
            return cst.Call(parse_expression("nnx.data"), [cst.Arg(updated)])
        return updated

    return stmt.with_changes(body=[small.visit(Mark())])
