"""Modules applied through a local of the method: ``m = Foo(...)``, then ``m(x)``.

``Foo(...)(x)`` with ``Foo`` neither a built-in layer nor a class of the run is flagged as a Linen
submodule the run does not see (``L2N-MOD-006``); so is the same module built into a local first, when
the local is bound once and what it holds is plainly built from outside: not a class a local of the
method holds (a transform of a class) and not a library helper that is handed the layers or modules the
method builds (``jraph.GraphMapFeatures(embed_node_fn=nn.Dense(...))``), whose layers the sizing follows.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_meta import calls_in
from linen2nnx.migrate.cst_utils import assigned_names, names_in, single_assign


def plain_foreign(ctx: FileContext, node: cst.CSTNode, ctor: cst.Call) -> bool:
    """``ctor`` (a local's value) builds something from outside that is handed no module, layer or
    function the method makes: not a class a local of the method holds (a transform of a class:
    ``Attn = vmap(...)``), nor a library helper that applies the layers it is given
    (``jraph.GraphMapFeatures(embed_node_fn=nn.Dense(...))``), which the sizing follows instead."""
    fn = ctx.enclosing_function(node)
    counts = assigned_names(fn) if fn is not None else {}
    if isinstance(ctor.func, cst.Name) and ctor.func.value in counts:
        return False
    values = [a.value for a in ctor.args]
    values += [
        v for a in ctor.args for n in names_in(a.value) if (v := local_value(ctx, node, n)) is not None
    ]
    for value in values:
        if isinstance(value, cst.Lambda) or any(
            ctx.layer_rule_of(c.func) or ctx.user_class_of(c.func) for c in calls_in(value)
        ):
            return False
    return True


def local_value(ctx: FileContext, node: cst.CSTNode, name: str) -> cst.BaseExpression | None:
    """The value of the one plain assignment to the local ``name`` of the method holding ``node``
    (in any block of it); None when it is bound otherwise or more than once."""
    fn = ctx.enclosing_function(node)
    return bound_once(fn, name) if fn is not None else None


def bound_once(fn: cst.FunctionDef, name: str) -> cst.BaseExpression | None:
    """The value of the one plain assignment to the local ``name`` of ``fn`` (in any block of it); None
    when it is bound otherwise or more than once."""
    if assigned_names(fn).get(name) != 1:
        return None
    for stmt in _statements(fn.body):
        assign = single_assign(stmt)
        if assign is not None and assign[0] == name:
            return assign[1]
    return None


def _statements(block: cst.CSTNode) -> Iterator[cst.BaseStatement]:
    """Every statement of a block, and of the blocks of its compound statements (not of nested defs)."""
    for stmt in block.body if isinstance(block, cst.IndentedBlock) else ():
        yield stmt
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        parts = [getattr(stmt, "body", None), getattr(stmt, "orelse", None), getattr(stmt, "finalbody", None)]
        parts += list(getattr(stmt, "handlers", ()))
        while parts:
            part = parts.pop(0)
            if isinstance(part, cst.IndentedBlock):
                yield from _statements(part)
            elif isinstance(part, (cst.If, cst.Else, cst.ExceptHandler, cst.Finally)):
                parts += [part.body, getattr(part, "orelse", None)]
