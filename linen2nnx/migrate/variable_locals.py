"""Locals that a ``self.param`` / ``self.variable`` call reads for its names or its ``*args``, made explicit.

Large-model code spells a variable's arguments through locals of the method::

    scale_args = (initializers.ones_init(), jax.random.PRNGKey(0), (1,), jnp.float32)
    COL = "_overwrite_with_gradient"
    self.input_scale = self.variable(COL, "input_scale", *scale_args)

Linen's ``variable(col, name, init_fn, *init_args)`` reads ``init_fn`` and its arguments out of the
splat, and the collection from the local. When such a local is bound exactly once in the method, by a
statement of the method's own body that runs before the call's statement, it holds that very value
at the call. So a string local may stand as its literal (a string is immutable), and a splat of a
tuple display of k plain elements as ``scale_args[0], ..., scale_args[k - 1]``: read from the same
tuple, so every element is still evaluated once, where the author's assignment evaluates it.
Anything else (a rebinding, a binding in a branch or a loop, a splat of a call's result) is left as it
was, and the planner's finding stays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import libcst as cst

from linen2nnx.migrate.cst_utils import assigned_names, parse_expression, single_assign

# binding forms assigned_names does not count; a local bound by one of them is never substituted
_OTHER_BINDINGS = (
    cst.NamedExpr,
    cst.WithItem,
    cst.ExceptHandler,
    cst.Global,
    cst.Nonlocal,
    cst.Del,
    cst.Import,
)
_OTHER_BINDINGS += (cst.ImportFrom, cst.ClassDef, cst.Lambda)


def variable_locals(
    fn: cst.FunctionDef, call: cst.Call, parent_of: Callable[[cst.CSTNode], cst.CSTNode | None]
) -> dict[str, cst.BaseExpression]:
    """The locals ``call`` (a ``self.param`` / ``self.variable`` call directly in ``fn``) reads as a
    positional argument or a ``*`` splat whose value at the call is known: name -> its string literal
    or tuple display. Empty when there is none."""
    wanted = {a.value.value for a in call.args if a.star in ("", "*") and isinstance(a.value, cst.Name)}
    if not wanted:
        return {}
    at = _body_index(fn, call, parent_of)
    if at is None:
        return {}
    counts = assigned_names(fn)
    wanted = {n for n in wanted if counts.get(n) == 1} - _otherwise_bound(fn)
    found: dict[str, cst.BaseExpression] = {}
    for stmt in fn.body.body[:at]:  # type: ignore[union-attr]
        bound = single_assign(stmt)
        if bound is None or bound[0] not in wanted:
            continue
        name, value = bound
        if isinstance(value, cst.SimpleString) or _plain_tuple(value):
            found[name] = value
    return found


def with_locals(call: cst.Call, found: Mapping[str, cst.BaseExpression], slots: int) -> cst.Call:
    """``call`` with each splat of a known tuple spread into indexed reads of it, and each of its first
    ``slots`` positional arguments (the collection and name slots) that is a known string local
    replaced by the literal; ``call`` itself when nothing changes."""
    if not found:
        return call
    args: list[cst.Arg] = []
    for a in call.args:
        value = found.get(a.value.value) if isinstance(a.value, cst.Name) else None
        if a.star == "*" and isinstance(value, cst.Tuple):
            name = a.value.value  # type: ignore[attr-defined]
            args.extend(cst.Arg(parse_expression(f"{name}[{i}]")) for i in range(len(value.elements)))
        elif a.star == "" and a.keyword is None and isinstance(value, cst.SimpleString) and len(args) < slots:
            args.append(cst.Arg(value))
        else:
            args.append(a.with_changes(comma=cst.MaybeSentinel.DEFAULT))
    if len(args) == len(call.args) and all(x.value is y.value for x, y in zip(args, call.args)):
        return call
    return call.with_changes(args=[a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in args])


def _plain_tuple(value: cst.BaseExpression) -> bool:
    """A tuple display whose length the text fixes (no ``*rest`` element)."""
    return isinstance(value, cst.Tuple) and not any(isinstance(e, cst.StarredElement) for e in value.elements)


def _body_index(
    fn: cst.FunctionDef, call: cst.Call, parent_of: Callable[[cst.CSTNode], cst.CSTNode | None]
) -> int | None:
    """The index in ``fn``'s body of the statement holding ``call``; None when ``call`` is not directly
    in ``fn`` (a nested function or lambda runs at another time)."""
    body = fn.body
    if not isinstance(body, cst.IndentedBlock):
        return None
    cur: cst.CSTNode | None = call
    while cur is not None:
        parent = parent_of(cur)
        if parent is body:
            return next((i for i, s in enumerate(body.body) if s is cur), None)
        if isinstance(parent, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return None
        cur = parent
    return None


def _otherwise_bound(fn: cst.FunctionDef) -> set[str]:
    """Names the binding forms :func:`assigned_names` does not count bind, or declare, in ``fn``
    (walrus, ``with ... as``, ``except ... as``, ``global``, ``del``, imports, nested classes and
    lambdas' parameters): such a local is never substituted."""

    class _Collect(cst.CSTVisitor):
        def __init__(self) -> None:
            self.names: set[str] = set()

        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, _OTHER_BINDINGS):
                self.names.update(n.value for n in _names(node))
            return True

    collect = _Collect()
    fn.body.visit(collect)
    return collect.names


def _names(node: cst.CSTNode) -> list[cst.Name]:
    """Every ``Name`` under ``node`` (conservative: a name merely read there is counted too)."""
    found: list[cst.Name] = []

    class _All(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.append(n)

    node.visit(_All())
    return found
